"""A real Kubernetes cluster as the scheduler's input: the translation of what phalanx.kube.watch lists and
watches into scheduler and queue calls (feed.py), reconciliation (reconcile.py) and leader election
(leader.py)."""
