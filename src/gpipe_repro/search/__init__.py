"""``gpipe-plan``: choose K, replicas, M, schedule, per-stage remat and the partition under a memory cap."""
