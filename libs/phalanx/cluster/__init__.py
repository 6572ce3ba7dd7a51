"""A real Kubernetes cluster as Phalanx's input: list-then-watch of the objects the scheduler needs
(watch.py) and their translation into scheduler and queue calls (feed.py)."""
