"""The embedded simulator: a workload replayed through the queue, scheduler and binder on a virtual clock, and
its JSON report (phalanx.report renders it; phalanx.bench.replay benchmarks it on a trace)."""
