"""`phalanx bench`: scheduler_perf-style workloads measured end to end through the three services and Redis
(see bench/README.md)."""
