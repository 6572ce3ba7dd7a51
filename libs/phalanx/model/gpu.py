"""How GPUs are accounted: whole GPUs as `nvidia.com/gpu`, and per device once a node is prepared for
placement (the GPUShare plugin adds one column per device and one for the shares together), so the
filters, the queueing hints and `explain` all speak of the same resources."""

from __future__ import annotations

from collections.abc import Mapping

GPU = "nvidia.com/gpu"
GPU_SHARE = "phalanx.dev/gpu-share"
DEVICE_PREFIX = "phalanx.dev/gpu-device-"
WHOLE = 1000  # one GPU in milli-units


def gpu_milli(requests: Mapping[str, int]) -> int:
    """GPU asked for in thousandths of a GPU: whole GPUs and a share of one count alike."""
    return requests.get(GPU, 0) + requests.get(GPU_SHARE, 0)


def device(i: int) -> str:
    return f"{DEVICE_PREFIX}{i}"
