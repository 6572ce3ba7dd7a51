"""The bounds every object and request must keep: one table for the intake and the services' checks.

The intake (phalanx.intake) refuses a Kubernetes object that breaks one of them, naming the object and the
field; the services (phalanx.rpc.validation) refuse a request that does. Both read the numbers here, so what
the intake accepts the wire accepts too, and bad input is reported where it enters instead of as a gRPC error.

The limits keep one request from costing unbounded memory or time, and keep every value within what the code
behind the services was written for: protobuf's integer widths, finite times, amounts Redis can add up.
"""

from __future__ import annotations

# Every number that crosses the wire must fit its protobuf field (see protos/phalanx/v1/objects.proto).
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
# Quantities are int64 on the wire, but the Redis state adds them up in Lua, whose numbers are doubles: past
# 2^53 an amount is rounded and HINCRBY refuses it. 2^53 milli-units is 9e12 cores, or 8 TiB of memory.
MAX_AMOUNT = 2**53 - 1
# The scheduler keeps one column per GPU of a node (GPU sharing), so a node of 10^15 GPUs would never load.
MAX_NODE_GPUS = 1024

# Pods, nodes, keys... in one request (and its lists together, for a step): a gang of 10,000 pods fits one
# call; a cluster's nodes or a burst of pods go in several. Clients split what is larger.
MAX_ITEMS = 10_000
MAX_BIND_BATCH = 10_000  # assignments bound as one batch
MAX_BIND_TOTAL = 10_000  # assignments across the batches of one BindMany
MAX_TIME = 1e12  # seconds: unix time or virtual time, ~31,700 years; keeps `now + delay` finite
MAX_KEY = 317  # a qualified label/annotation/resource name: 253-character prefix, "/", 63-character name
MAX_VALUE = 256 * 1024  # an annotation value (Kubernetes caps all of a pod's annotations at 256 KiB)
MAX_ENTRIES = 4_096  # entries of one map, terms of a placement, taints of a node, members of a gang group
MAX_ID = 253  # uids, consumer names
MAX_TEXT = 64 * 1024  # free text: reasons, messages
MAX_TRACE = 512  # a W3C traceparent is 55 characters
