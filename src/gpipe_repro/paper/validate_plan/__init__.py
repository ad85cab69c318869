"""The planner validated against an exhaustive measured sweep (``make validate-plan``, issue #19)."""
