"""GangReports in each PodGroup API group's own status vocabulary."""

from __future__ import annotations

from phalanx.backends.cluster_view import ClusterView
from phalanx.kube.podgroups import VOLCANO_READY_REASON, group_of, pods_phase, status_patch
from phalanx.model.binding import GangReport
from phalanx.model.keys import GROUP_SIGS, GROUP_VOLCANO, GROUP_X_K8S, LABEL_X_K8S_PODGROUP


def test_group_of_source() -> None:
    assert group_of(f"podgroup/{GROUP_X_K8S}") == GROUP_X_K8S
    assert group_of(f"podgroup/{GROUP_VOLCANO}") == GROUP_VOLCANO
    assert group_of("koordinator-annotations") is None
    assert group_of("podgroup/example.com") is None


def test_scheduler_plugins_status() -> None:
    report = GangReport(
        gang_key="ns/g", phase="Scheduling", scheduled=0, message="2/4 placed", schedule_start_time=1_700_000_000.0
    )
    patch = status_patch(GROUP_SIGS, report, 1_700_000_005.0)
    assert patch == {"status": {"phase": "Scheduling", "scheduled": 0, "scheduleStartTime": "2023-11-14T22:13:20Z"}}
    counts = GangReport(gang_key="ns/g", scheduled=4, has_counts=True, running=3, succeeded=1)
    assert status_patch(GROUP_X_K8S, counts, 0.0) == {
        "status": {"scheduled": 4, "running": 3, "succeeded": 1, "failed": 0}
    }  # no phase: left as it is


def test_volcano_status_phases_and_conditions() -> None:
    waiting = status_patch(GROUP_VOLCANO, GangReport(gang_key="ns/g", phase="Scheduling", message="m"), 0.0)["status"]
    assert waiting["phase"] == "Inqueue"
    assert (waiting["conditions"][0]["type"], waiting["conditions"][0]["reason"]) == ("Unschedulable", "NotEnoughTasks")
    failed = status_patch(
        GROUP_VOLCANO, GangReport(gang_key="ns/g", phase="Failed", unschedulable=True, message="t"), 0.0
    )["status"]
    assert failed["phase"] == "Pending"
    assert failed["conditions"][0]["reason"] == "NotEnoughResources" and failed["conditions"][0]["message"] == "t"
    scheduled = status_patch(GROUP_VOLCANO, GangReport(gang_key="ns/g", phase="Scheduled"), 0.0)["status"]
    assert scheduled["phase"] == "Running"
    assert (scheduled["conditions"][0]["type"], scheduled["conditions"][0]["reason"]) == (
        "Scheduled",
        VOLCANO_READY_REASON,
    )
    assert "scheduled" not in scheduled  # Volcano's status has no such field
    assert status_patch(GROUP_VOLCANO, GangReport(gang_key="ns/g", phase="Finished"), 0.0)["status"] == {
        "phase": "Completed"
    }


def phase(
    live: int = 0,
    placed: int = 0,
    bound: int = 0,
    running: int = 0,
    succeeded: int = 0,
    failed: int = 0,
    previous: str = "",
) -> str:
    """The phase of a gang of min 4 whose pods are as given."""
    return pods_phase(
        4,
        live=live,
        placed=placed,
        bound=bound,
        running=running,
        succeeded=succeeded,
        failed=failed,
        previous=previous,
    )


def test_pods_phase_follows_the_pods_forward() -> None:
    """scheduler-plugins' PodGroup controller's rules, in Phalanx's phase words."""
    assert phase(live=4) == "Pending"  # created, nothing placed
    assert phase(live=4, placed=2) == "Scheduling"  # some placed, fewer than the minimum
    assert phase(live=4, placed=4, bound=4) == "Scheduled"  # bound, not running yet
    assert phase(live=4, placed=4, bound=4, running=3) == "Scheduled"
    assert phase(live=4, placed=4, bound=4, running=4) == "Running"
    assert phase(live=3, placed=3, bound=3, running=3, succeeded=1) == "Running"
    assert phase(succeeded=4) == "Finished"
    assert phase(live=3, placed=3, bound=3, running=3, failed=1) == "Failed"


def test_pods_phase_goes_back_when_pods_disappear() -> None:
    """The issue's PodGroup: its whole gang evicted, it said Running with running: 0."""
    assert phase(previous="Running") == "Pending"  # every pod deleted
    assert phase(live=4, previous="Running") == "Pending"  # recreated, not placed yet
    assert phase(live=4, placed=2, bound=2, running=2, previous="Running") == "Scheduling"  # 2 of 4 left
    assert phase(live=2, placed=2, bound=2, running=2, previous="Running") == "Scheduling"
    for previous in ("", "Pending", "Scheduling", "Scheduled", "Running"):
        assert phase(live=0, previous=previous) != "Running"


def test_a_finished_or_failed_gang_keeps_its_phase_until_pods_return() -> None:
    assert phase(previous="Finished") == "Finished"  # its pods cleaned up after the job
    assert phase(failed=0, previous="Failed") == "Failed"
    assert phase(live=4, previous="Failed") == "Pending"  # recreated after the failure: derived again
    assert pods_phase(0, live=1, placed=1, bound=1, running=1, succeeded=0, failed=0) == ""


def test_the_binder_remembers_a_podgroup_whose_pods_were_all_deleted() -> None:
    """The report that a gang's pods are gone must reach its PodGroup although no pod names it any more."""
    view = ClusterView(object(), "phalanx")
    labels = {"labels": {LABEL_X_K8S_PODGROUP: "train"}}
    for name in ("a", "b"):
        meta = {"name": name, "namespace": "ns", "uid": name, **labels}
        view._sink("binder-pods", "ADDED", {"metadata": meta, "spec": {"schedulerName": "phalanx"}})
    assert not view.vacated(GROUP_X_K8S, "ns", "train")
    view._sink("binder-pods", "DELETED", {"metadata": {"name": "a", "namespace": "ns"}})
    assert not view.vacated(GROUP_X_K8S, "ns", "train")  # b still names it
    view._sink("binder-pods", "DELETED", {"metadata": {"name": "b", "namespace": "ns"}})
    assert view.vacated(GROUP_X_K8S, "ns", "train")
    meta = {"name": "a", "namespace": "ns", "uid": "a2", **labels}
    view._sink("binder-pods", "ADDED", {"metadata": meta, "spec": {"schedulerName": "phalanx"}})
    assert not view.vacated(GROUP_X_K8S, "ns", "train")  # named again: ours by its pods
