"""Prometheus metrics of the three services (one registry per process, a /metrics port each)."""
