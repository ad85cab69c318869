"""Experiments that measure on this machine: ranks launched, devices emulated, the host calibrated.

The simulator's validation (``simulator``) and the planner's (``planner``) time cells of the real
engine (``ranks``) or of the engine in emulation mode (``emulate``) on the validation's small models
(``models``), after the one host calibration (``calibration``); this CPU's roofline is held against
its measured layers (``roofline_check``); Table 4's runs are launched as jobs (``transfer_jobs``). Everything
here writes CSV rows and JSON only; ``paper/`` turns them into pages.
"""
