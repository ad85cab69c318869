"""A run's plan, decided once before anything runs (``plan``), and its costing on a hardware profile
(``costing``): the micro-batch, the partition, every stage's memory and the device budget, which the
guard, ``batch_mode=fit``, the simulated backend, predictions and the ranks read and none recomputes."""
