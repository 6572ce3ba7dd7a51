"""The words Phalanx reports in (phalanx.model.status) are the exact strings the API server and the binder see."""

from __future__ import annotations

import json

from phalanx.backends.kube_guard import EVENT_REASONS, NORMAL_EVENT_REASONS, event_reason_allowed
from phalanx.kube.podgroups import status_patch
from phalanx.model import keys
from phalanx.model.binding import GangReport
from phalanx.model.status import TERMINAL_POD_PHASES, EventReason, GangPhase, PodPhase


def test_the_binder_writes_exactly_the_event_reasons_phalanx_has() -> None:
    assert EVENT_REASONS == {
        "Scheduled",
        "FailedScheduling",
        "GangWaiting",
        "GangScheduled",
        "GangTimeout",
        "Preempted",
        "Preempting",
    }
    assert NORMAL_EVENT_REASONS == {"Scheduled", "GangScheduled", "GangWaiting", "Preempted", "Preempting"}
    assert event_reason_allowed("GangTimeout", "gang g") and not event_reason_allowed("Evicted", "gang g")
    assert [r for r in EventReason if not r.normal] == [EventReason.FAILED_SCHEDULING, EventReason.GANG_TIMEOUT]


def test_members_travel_as_their_strings() -> None:
    report = GangReport(gang_key="ns/g", phase=GangPhase.SCHEDULING, event_reason=EventReason.GANG_WAITING)
    assert (report.phase, report.event_reason) == ("Scheduling", "GangWaiting")
    assert json.dumps({"phase": PodPhase.SUCCEEDED}) == '{"phase": "Succeeded"}'
    assert "Failed" in TERMINAL_POD_PHASES and "Running" not in TERMINAL_POD_PHASES


def test_volcano_gets_each_gang_phase_in_its_own_words() -> None:
    said = {
        phase: status_patch(keys.GROUP_VOLCANO, GangReport(gang_key="ns/g", phase=phase), 0.0)["status"]["phase"]
        for phase in GangPhase
    }
    assert said == {
        "Pending": "Pending",
        "Scheduling": "Inqueue",
        "Scheduled": "Running",
        "Running": "Running",
        "Finished": "Completed",
        "Failed": "Pending",
    }
    assert all(type(v) is str for v in said.values())  # plain strings in the JSON body
    unknown = GangReport(gang_key="ns/g", phase="Evicted")
    assert status_patch(keys.GROUP_VOLCANO, unknown, 0.0)["status"]["phase"] == "Unknown"
