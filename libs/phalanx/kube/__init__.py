"""Kubernetes plumbing shared by the scheduler's cluster feed and the binder's backend: the API client
(client.py) and the calls made through it (api.py: raw requests, not the client's generated API classes),
list-then-watch (watch.py) and the PodGroup APIs with their status vocabularies (podgroups.py).

It sits below both sides: it imports neither phalanx.cluster (the scheduler's feed) nor phalanx.backends.
"""
