"""The schedule simulator: a training step of the engine's own schedules, timed from per-layer costs."""
