"""Issue 22 through the real stack (redis-server and the three services as processes, driven by the
simulator on a virtual clock): a timed-out gang of a retrying form (a scheduler-plugins PodGroup, as Kubeflow's
training-operator writes it) backs off and binds whole once capacity is there, while Koordinator's stays
timed out; and a scheduler killed between a timeout's release and its retry leaves nothing partial or stuck.

The cluster: three 4-GPU nodes whose other tenants leave 1 + 1 + 2 GPUs free; the job's pods ask 2 GPUs (or
1, for the NonStrict job) and wait 15 s. The tenants of n1 and n2 (6 GPUs) end at 20 s, during the backoff."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from builders import make_podgroup
from test_simulate_scenarios import by_name, gpu_node, run, worker

from phalanx.model.keys import (
    KOORD_MIN_AVAILABLE,
    KOORD_MODE,
    KOORD_NAME,
    KOORD_TIMEOUT,
    KOORD_WAITING_TIME,
    LABEL_X_K8S_PODGROUP,
    SIM_DURATION,
)

pytestmark = pytest.mark.integration


def cluster(tenants_end: str = "20s") -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [gpu_node(f"n{i}", 4) for i in (1, 2, 3)]
    for name, node, gpus, lasts in (("t1", "n1", 3, tenants_end), ("t2", "n2", 3, tenants_end), ("t3", "n3", 2, "")):
        tenant = worker(name, gpus=gpus).set("spec.nodeName", node)
        objects.append((tenant.annotation(SIM_DURATION, lasts) if lasts else tenant).build())
    return objects


def training_job(size: int = 2, gpus: int = 2, mode: str = "Strict") -> list[dict[str, Any]]:
    """What the training-operator writes: a scheduler-plugins PodGroup with scheduleTimeoutSeconds, and pods
    labelled with it."""
    group = make_podgroup("train").min_member(size).set("spec.scheduleTimeoutSeconds", 15).build()
    pods = [
        worker(f"train-{i}", gpus=gpus).label(LABEL_X_K8S_PODGROUP, "train").annotation(KOORD_MODE, mode).build()
        for i in range(size)
    ]
    return [group, *pods]


def koordinator_job() -> list[dict[str, Any]]:
    return [
        worker(f"train-{i}", gpus=2)
        .annotation(KOORD_NAME, "train")
        .annotation(KOORD_MIN_AVAILABLE, "2")
        .annotation(KOORD_WAITING_TIME, "15s")
        .build()
        for i in range(2)
    ]


def check_bound_whole_at_the_retry(report: dict[str, Any], size: int) -> None:
    pods = by_name(report)
    job = [pods[f"train-{i}"] for i in range(size)]
    assert {p["boundAt"] for p in job} == {25.0}  # timed out at 15, backed off 10 s, bound whole
    assert all(KOORD_TIMEOUT not in p["annotations"] for p in job)
    groups = {g["name"]: g for g in report["podGroups"]}
    assert (groups["train"]["bound"], groups["train"]["timedOut"]) == (size, False)
    assert report["summary"]["partialGangs"] == 0


def test_a_scheduler_plugins_job_backs_off_and_binds_whole_when_gpus_are_freed(tmp_path: Path) -> None:
    report = run(tmp_path, cluster() + training_job())
    check_bound_whole_at_the_retry(report, 2)
    # What the gang was told before it bound: its timeout, and that it would be retried.
    reasons = {g["gang"]: g["reason"] for g in report["gangReasons"]}
    assert reasons["default/train"].startswith("gang default/train timed out after waiting 15s with 0/2 pods placed")
    assert reasons["default/train"].endswith("; retrying after 10s")


def test_a_koordinator_job_in_the_same_cluster_stays_timed_out(tmp_path: Path) -> None:
    report = run(tmp_path, cluster() + koordinator_job())
    pods = by_name(report)
    job = [pods[f"train-{i}"] for i in range(2)]
    assert all(p["boundAt"] is None and p["annotations"].get(KOORD_TIMEOUT) == "true" for p in job)
    assert all(p["reason"].endswith("it will not be scheduled again until its pods are recreated") for p in job)
    assert [(g["phase"], g["timedOut"]) for g in report["podGroups"]] == [("Failed", True)]


def test_the_backoff_is_a_setting(tmp_path: Path) -> None:
    report = run(tmp_path, cluster() + training_job(), gang_retry_backoff=30)
    assert {by_name(report)[f"train-{i}"]["boundAt"] for i in range(2)} == {45.0}


def test_a_job_that_never_fits_retries_until_nothing_more_can_happen(tmp_path: Path) -> None:
    # The other tenants never end: the job times out at 15, retries at 25 and times out again at 40. Twice
    # with nothing bound in between: the run stops there (without that rule it would retry for ever).
    report = run(tmp_path, cluster(tenants_end="") + training_job())
    assert report["summary"]["podsBound"] == 3  # the tenants
    assert report["summary"]["virtualSeconds"] == 40.0
    job = [p for p in report["pods"] if p["gang"]]
    assert all(p["reason"].endswith("; retrying after 10s") and KOORD_TIMEOUT not in p["annotations"] for p in job)
    assert [(g["phase"], g["timedOut"]) for g in report["podGroups"]] == [("Pending", True)]


def test_scheduler_killed_between_a_timeout_and_its_retry_binds_the_gang_whole(tmp_path: Path) -> None:
    """NonStrict: four 1-GPU pods are reserved, the fifth fits nowhere. The scheduler dies right after the
    timeout's release is in Redis, before anything is told: the new one keeps the backoff (Redis has it),
    the four pods it had reserved are back in the queue, and the gang binds whole at the retry."""
    report = run(
        tmp_path,
        cluster("20s") + training_job(size=5, gpus=1, mode="NonStrict"),
        scheduler_env={"PHALANX_FAULT": "scheduler.after_timeout:1"},
    )
    assert report["summary"]["schedulerRestarts"] == 1
    check_bound_whole_at_the_retry(report, 5)
