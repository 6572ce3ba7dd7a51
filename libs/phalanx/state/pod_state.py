"""What Redis records about a reserved pod (the `podstate` hash)."""

from __future__ import annotations

from enum import StrEnum


class PodState(StrEnum):
    ASSUMED = "assumed"  # reserved by the scheduler, not bound
    # The binder recorded its intent and may have written the binding to the API server: it is rolled
    # forward (bound), never released, while it exists.
    BINDING = "binding"
    BOUND = "bound"
