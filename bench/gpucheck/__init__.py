"""The steps of ``make gpu-check`` (``bench/gpu_check.py``), one module each, each run in a process of
its own with a time limit: ``tests`` (the gpu tests one GPU can run), ``tf32`` (CUDA losses against
the CPU's), ``cells`` (the memory planner against the allocator, CUDA-event busy time against wall
time, measured step time against the roofline profiles), ``profiles`` (the Table 2/3 models' per-layer
costs on this GPU, kept as files) and ``engine`` (the engine benchmark); ``report`` writes the page."""
