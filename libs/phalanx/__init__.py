"""Phalanx: all-or-nothing gang scheduling for Kubernetes."""
