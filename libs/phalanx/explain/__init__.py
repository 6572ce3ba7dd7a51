"""`phalanx explain`: why each gang waits, from a live cluster or a simulation report."""
