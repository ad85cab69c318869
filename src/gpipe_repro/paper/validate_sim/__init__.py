"""The simulator against the real engine on this machine (issue #9): measured, emulated, simulated cells."""
