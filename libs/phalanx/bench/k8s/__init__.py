"""`phalanx bench-k8s`: Phalanx and kube-scheduler + Coscheduling side by side on a real kube-apiserver.

Every run starts a fresh etcd + kube-apiserver (LocalApiServer, with the PodGroup CRDs), creates fake Nodes
(no kubelet: capacity through the status subresource), one namespace, every PodGroup and every Pod, all
BEFORE the scheduler under test is started; then it launches the scheduler and watches what happens:

- time from launch to the first and to the last binding, and each pod's binding time (pod watch);
- status lag after the binding: the `Scheduled` Event (event watch), the pod's PodScheduled condition (pod
  watch) and, where the scheduler writes one, the PodGroup status that says the gang is scheduled
  (PodGroup watch);
- API requests made during the run, by verb and resource: kube-apiserver's `apiserver_request_total`
  from /metrics before launch and after the statuses settled (the harness itself sends nothing in that
  window: its watches are counted when they end, after it);
- peak RSS (VmHWM) and CPU seconds of every scheduler process, and of kube-apiserver and etcd over the
  window (psutil, and /proc for the peak);
- correctness, from a final LIST: no partial gang (each gang has 0 or >= minMember pods bound), no node
  over its allocatable cpu, memory, GPUs or pod count, and the expected number of pods bound.

The schedulers: Phalanx as deployed (phalanx.testing.stack.ChaosStack: Redis with a password and the queue,
binder and scheduler as separate processes with mutual TLS and the Kubernetes backend), and the peer:
kube-scheduler with scheduler-plugins' Coscheduling (hack/build-peer-scheduler.sh). Both read the same
objects: a scheduling.x-k8s.io PodGroup per gang, pods labelled scheduling.x-k8s.io/pod-group; only the
pods' schedulerName differs.

The modules: workloads (the shapes and the objects created), arrival (a steady shape's gangs created at a
fixed rate during the run), schedulers (the two under test), observe (the watches and the final check),
runner (one run, the suite), report (medians, the table), profile (py-spy on Phalanx's processes, and its
summary), cli (the command);
kubeapi sends the harness's requests through phalanx.kube.api.KubeApi, and observe watches through
phalanx.kube.watch.
"""
