"""One rank of one run (``RankRun``): build this stage from the run's plan, train it, report.

``run``: the class and its loop; ``parts``: what the loop asks after each step (saver, progress, stop
vote, divergence check, heartbeat); ``evaluate``: evaluation by the model's task; ``balance``:
``balance_by=time`` measured by the ranks on their devices.
"""

from .parts import DIVERGED, HEARTBEAT_DIR, STOP_FILE
from .run import RankContext, RankRun, run_rank

__all__ = ["RankContext", "RankRun", "run_rank", "DIVERGED", "HEARTBEAT_DIR", "STOP_FILE"]
