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
# A Volcano pod's role (its task's name), which a PodGroup's spec.minTaskMember counts by: Volcano reads the
# annotation, and the label when there is no annotation (its job controller writes both).
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"
KUBE_BATCH_MIN_MEMBER = "scheduling.k8s.io/group-min-member"
DELAYED_BIND_POD_NUM = "scheduling.k8s.io/group-pod-num"
CONFIGMAP_LABEL = "pod-group.scheduling.bdap.com/podgroup-configmap"

# PodGroup API groups.
GROUP_X_K8S = "scheduling.x-k8s.io"
GROUP_SIGS = "scheduling.sigs.k8s.io"
GROUP_VOLCANO = "scheduling.volcano.sh"
# Kubernetes' own (the Workload API, KEP-4671): a pod names its PodGroup in spec.schedulingGroup.podGroupName.
GROUP_K8S = "scheduling.k8s.io"
GROUP_K8S_VERSION = "v1alpha2"  # the 1.36 shape, the only one read: its other versions have no such PodGroup

# Simulation.
SIM_DURATION = "simulation.phalanx.dev/duration"

DEFAULT_SCHEDULER_NAME = "phalanx"

# A job's policies (seed 001's Arranger): on its pods; the profile / queue service set the defaults.
BASIC_POLICY = "phalanx.dev/basic-policy"  # how its pods are placed: BinPack, LeaderFirst, ...
JOB_QUEUE_POLICY = "phalanx.dev/job-queue-policy"  # how it is ordered among jobs: Priority or DRF
ROLE = "phalanx.dev/role"  # leader | worker (label or annotation), for LeaderFirst
JOB_TOPOLOGY_KEY = "phalanx.dev/job-topology-key"  # node label JobAffinity/JobAntiAffinity group nodes by
QUEUE_NAME = "phalanx.dev/queue"  # the tenant a job's DRF share counts against (default: its namespace)
