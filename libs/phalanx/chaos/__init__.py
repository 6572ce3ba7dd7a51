"""Fault injection against a real kube-apiserver: `phalanx chaos` (`make chaos`, `make soak`).

Each trial runs Redis and the three services as separate OS processes, started as a Helm deployment
starts them, against one etcd + kube-apiserver shared by the run; a stand-in kubelet runs and finishes
the pods; one process is SIGKILLed (or exits at a deterministic kill point, `phalanx.faults`) in the busy
phase and restarted like a crashed container; invariants are checked from the API server throughout and
Redis is compared with the API server at the end.

| module | what it does |
|---|---|
| `cluster.py` | the shared API server with the PodGroup CRDs; one trial's namespaces and nodes |
| `snapshot.py` | one consistent read of the trial's pods and nodes |
| `stack.py` | redis-server and the three services as child processes that can be killed and restarted |
| `workload.py` | the seeded gangs, pods and nodes of a trial |
| `kubelet.py` | marks bound pods Running, finishes gangs after their run time |
| `invariants.py` | the checks, on snapshots and on Redis' records (pure functions) |
| `trials.py` | one trial from start to verdict; `soak.py` the long run without kills |
| `report.py`, `cli.py` | the table, the JSON, the `phalanx chaos` command |
"""
