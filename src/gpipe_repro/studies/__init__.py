"""What the paper's tables compute beside the engine's sweeps: the paper's own numbers, the memory
model's Table 1 and the simulator's studies of Tables 2 and 3, as typed rows.

Each module here returns rows (dataclasses the report writes through ``typed_csv``) and never
Markdown: ``paper`` renders them. ``published`` holds the paper's printed numbers; ``table1`` plans
every column of Table 1; ``sensitivity`` runs the simulator's studies of Tables 2 and 3 (partition,
link, per-sample efficiency, schedule search); ``gpu_series`` simulates the tables on a committed
GPU profile; ``throughput_rows`` is the rows those tables share.
"""
