"""Seed 001's Arranger job (TYJob) as Phalanx's PhalanxJob: its API and validation (`api`), the objects a
job is made of (`objects`), the rules that take it through its stages (`reconcile`, pure, shared by the
controller service and tests) and the controller loop against the API server (`controller`)."""
