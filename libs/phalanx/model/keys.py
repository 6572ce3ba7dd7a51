"""Annotation, label and API-group names Phalanx reads and writes (see docs/compatibility in README)."""

# Koordinator annotation way, and the PodGroup annotations of its CRD way.
KOORD = "gang.scheduling.koordinator.sh"
KOORD_NAME = f"{KOORD}/name"
KOORD_MIN_AVAILABLE = f"{KOORD}/min-available"
KOORD_WAITING_TIME = f"{KOORD}/waiting-time"
KOORD_TOTAL_NUMBER = f"{KOORD}/total-number"
KOORD_MODE = f"{KOORD}/mode"
KOORD_GROUPS = f"{KOORD}/groups"
KOORD_MATCH_POLICY = f"{KOORD}/match-policy"
KOORD_TIMEOUT = f"{KOORD}/timeout"

# Pod -> PodGroup links.
LABEL_X_K8S_PODGROUP = "scheduling.x-k8s.io/pod-group"
LABEL_SIGS_PODGROUP = "pod-group.scheduling.sigs.k8s.io"
LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN_AVAILABLE = "pod-group.scheduling.sigs.k8s.io/min-available"
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
KUBE_BATCH_MIN_MEMBER = "scheduling.k8s.io/group-min-member"
DELAYED_BIND_POD_NUM = "scheduling.k8s.io/group-pod-num"
CONFIGMAP_LABEL = "pod-group.scheduling.bdap.com/podgroup-configmap"

# PodGroup API groups.
GROUP_X_K8S = "scheduling.x-k8s.io"
GROUP_SIGS = "scheduling.sigs.k8s.io"
GROUP_VOLCANO = "scheduling.volcano.sh"

# Simulation.
SIM_DURATION = "simulation.phalanx.dev/duration"

DEFAULT_SCHEDULER_NAME = "phalanx"
