"""The committed reports as a whole: which are stale (``status``) and remaking them (``remake``).

``paper`` makes one report at a time; this package keeps ``reports/`` current: each report's
commit against the code its numbers come from, and one command that runs the stale reports' make
targets one after the other, then the scorecard.
"""
