"""Import the Alibaba "openb" GPU trace (cluster-trace-gpu-v2023, used by the FGD paper) as a workload.

Inputs
  Node CSV ``sn,cpu_milli,memory_mib,gpu,model`` -> v1 Node with allocatable cpu "<milli>m", memory
  "<mib>Mi", nvidia.com/gpu "<gpu>" (left out when 0), pods "110", and label
  ``phalanx.dev/gpu-model: <model>`` (sanitised to a valid label value; no label when model is empty).

  Pod CSV ``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,
  deletion_time,scheduled_time]`` (times in seconds) -> v1 Pod requesting cpu/memory and, for GPU pods,
  ``nvidia.com/gpu: num_gpu``. ``gpu_milli`` is the share of each GPU: 1000 (or 0/empty) means whole
  GPUs. ``gpu_spec`` such as ``V100M16|V100M32`` becomes a required node affinity
  ``phalanx.dev/gpu-model In [V100M16, V100M32]`` (ignored on CPU-only pods). Extra columns and the
  qos/pod_phase values are ignored; names must be unique.

Fractional GPUs (0 < gpu_milli < 1000)
  A pod sharing one GPU becomes ``phalanx.dev/gpu-share: <gpu_milli>m`` (e.g. 300m: 30% of one GPU),
  which Phalanx places on a single device with that much free (libs/phalanx/plugins/gpu_share.py): no
  rounding. ``--skip-fractional`` leaves such pods out instead (the number skipped is reported on stderr
  and in the YAML header comment). A fractional share of several GPUs (num_gpu > 1 with gpu_milli <
  1000) has no faithful form and is refused naming the row, unless skipped. (3078 of the 8152 pods of
  openb_pod_list_default share one GPU; none shares several.)

Durations
  ``simulation.phalanx.dev/duration`` = deletion_time - scheduled_time. Pods never scheduled in the
  trace (empty scheduled_time, phase Pending) use deletion_time - creation_time, i.e. how long they
  waited before being deleted; in a what-if run they may be placed and then run that long. No
  annotation (the pod never finishes) when a time is missing or the difference is negative.

Arrival (``--arrival``)
  ``trace`` (default)  creationTimestamp = BASE_TIME + creation_time (BASE_TIME is
                       2026-01-01T00:00:00Z, see writer.py); pods ordered by creation_time.
  ``rate:R``           R pods per second in trace order (creation order when the file has
                       creation_time, else row order); pod i arrives at i/R s. Trace durations kept.
  ``fgd:SEED[:FACTOR]`` the FGD paper's experiment: shuffle the pods (random.Random(SEED)) and take
                       them in that order, then sample with replacement once all are used, until the
                       total GPU request reaches FACTOR (default 1.3) x the node file's GPUs; the
                       selection is shuffled again and pods arrive 1 s apart and never leave.
                       Re-sampled pods are renamed ``<name>-r<k>``. Unlike the paper, fractional pods
                       cannot take part (they must be skipped), so only whole-GPU demand counts.
  The multigpu20 variant has no time columns: use ``rate:R`` or ``fgd:...`` (``trace`` is an error);
  its pods get no duration.

Gangs (``--gang-rule`` / ``--gang-size``), applied in arrival order; every gang has
min-available = total-number = its size and gang names ``gang-00001``, ``gang-00002``, ... numbered
by the arrival of their first pod. Pods keep their own arrival times.
  ``none`` (default)   every pod is alone.
  ``size:N`` / ``--gang-size N``  every N consecutive GPU pods of the same shape (cpu, memory,
                       num_gpu, gpu_milli, gpu_spec) form a gang; CPU-only pods stay alone; a trailing
                       incomplete group of a shape stays a smaller gang (min-available = its size, so
                       a lone trailing pod is a gang of one).
  ``window:SECONDS``   multi-GPU pods (num_gpu >= 2) of the same shape arriving within SECONDS of the
                       gang's first pod form one gang, up to ``--max-gang-size`` (default 64) pods; a
                       pod arriving later, or once the gang is full, starts a new one. A group of one
                       stays a plain pod; single-GPU and CPU-only pods stay alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The options' parsers are used through this module (the trace CLI, phalanx.bench): re-exported.
from phalanx.trace.openb_arrivals import DEFAULT_MAX_GANG_SIZE as DEFAULT_MAX_GANG_SIZE
from phalanx.trace.openb_arrivals import Arrival, Arrived, GangRule, form_gangs, schedule_arrivals
from phalanx.trace.openb_arrivals import parse_arrival as parse_arrival
from phalanx.trace.openb_arrivals import parse_gang_rule as parse_gang_rule
from phalanx.trace.openb_csv import drop_fractional, read_nodes, read_pods
from phalanx.trace.writer import (
    BASE_TIME,
    GangRef,
    PodShape,
    TraceError,
    Workload,
    is_dns_label,
)


@dataclass(frozen=True, slots=True)
class ImportOptions:
    arrival: Arrival = Arrival()
    gang_rule: GangRule = GangRule()
    skip_fractional: bool = False
    namespace: str = "default"


# ---------------------------------------------------------------- the import


@dataclass(slots=True)
class ImportResult:
    workload: Workload
    rows: int  # pod rows in the file
    skipped_fractional: int


def import_openb(nodes_path: Path, pods_path: Path, options: ImportOptions = ImportOptions()) -> ImportResult:
    if not is_dns_label(options.namespace):
        raise TraceError(f"--namespace {options.namespace!r} is not a valid namespace name (RFC 1123 label)")
    nodes = read_nodes(nodes_path)
    table = read_pods(pods_path)
    pods, skipped = drop_fractional(table, options.skip_fractional)
    cluster_gpus = sum(node.gpus for node in nodes)
    arrived = schedule_arrivals(table, pods, options.arrival, cluster_gpus)
    gangs = form_gangs(arrived, options.gang_rule)
    shapes = [_pod_shape(item, gang, options.namespace) for item, gang in zip(arrived, gangs)]
    header = _header(nodes_path, pods_path, options, len(nodes), cluster_gpus, len(table.pods), len(shapes), skipped)
    return ImportResult(
        workload=Workload(nodes=nodes, pods=shapes, header=header), rows=len(table.pods), skipped_fractional=skipped
    )


def _pod_shape(item: Arrived, gang: GangRef | None, namespace: str) -> PodShape:
    pod = item.pod
    return PodShape(
        name=item.name,
        namespace=namespace,
        arrival=item.at,
        cpu=f"{pod.cpu_milli}m",
        memory=f"{pod.memory_mib}Mi",
        gpus=0 if pod.fractional else pod.num_gpu,
        gpu_share_milli=pod.gpu_milli if pod.fractional else 0,
        gpu_models=pod.gpu_models,
        duration=item.duration,
        gang=gang,
    )


def _header(
    nodes_path: Path,
    pods_path: Path,
    options: ImportOptions,
    nodes: int,
    gpus: int,
    rows: int,
    pods: int,
    skipped: int,
) -> list[str]:
    skipped_text = f"{skipped} fractional-GPU pods skipped (--skip-fractional)" if skipped else "0 fractional-GPU pods"
    return [
        "Phalanx workload generated by `phalanx trace import openb` (Alibaba cluster-trace-gpu-v2023).",
        f"nodes: {nodes_path} ({nodes} nodes, {gpus} GPUs)",
        f"pods: {pods_path} ({rows} rows -> {pods} pods; {skipped_text})",
        f"arrival: {options.arrival.describe()}; gang rule: {options.gang_rule.describe()}",
        f"time 0 = {BASE_TIME:%Y-%m-%dT%H:%M:%SZ}; creationTimestamp = time 0 + arrival seconds",
    ]
