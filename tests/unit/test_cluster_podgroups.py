"""GangReports in each PodGroup API group's own status vocabulary."""

from __future__ import annotations

from phalanx.kube.podgroups import VOLCANO_READY_REASON, counts_phase, group_of, status_patch
from phalanx.model.binding import GangReport
from phalanx.model.keys import GROUP_SIGS, GROUP_VOLCANO, GROUP_X_K8S


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


def test_counts_phase() -> None:
    assert counts_phase(4, running=2, succeeded=0, failed=0) == ""
    assert counts_phase(4, running=3, succeeded=1, failed=0) == "Running"
    assert counts_phase(4, running=0, succeeded=4, failed=0) == "Finished"
    assert counts_phase(4, running=3, succeeded=0, failed=1) == "Failed"
