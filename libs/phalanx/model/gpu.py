"""How GPUs are accounted: whole GPUs as `nvidia.com/gpu`, and per device once a node is prepared for
placement (the GPUShare plugin adds one column per device and one for the shares together), so the
filters, the queueing hints and `explain` all speak of the same resources."""

from __future__ import annotations

GPU = "nvidia.com/gpu"
GPU_SHARE = "phalanx.dev/gpu-share"
DEVICE_PREFIX = "phalanx.dev/gpu-device-"
WHOLE = 1000  # one GPU in milli-units


def device(i: int) -> str:
    return f"{DEVICE_PREFIX}{i}"
