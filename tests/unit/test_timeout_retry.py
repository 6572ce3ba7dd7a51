"""What a gang's timeout does follows the form that declared it (issue 22): Koordinator's forms give the gang
up for good, marking its pods; the others (scheduler-plugins, Volcano, ...) release it, back off for the
scheduler's --gang-retry-backoff, and try it again with a fresh wait. Driven in process over a real Redis.

The scenario is the one seen under Kubeflow's training-operator: the free GPUs split 1+1+2, pods of 2 GPUs,
a 15 s wait; 6 GPUs are freed while the gang backs off."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from builders import gang_spec, make_pod, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.gang.manager import GangStatus
from phalanx.intake import gangs as forms
from phalanx.intake.pods import parse_pod
from phalanx.kube import podgroups
from phalanx.model import keys
from phalanx.model.binding import GangReport
from phalanx.model.objects import GangMode
from phalanx.model.status import GangPhase
from phalanx.queueing.hints import FreedCapacity
from phalanx.state.store import StateStore, decoded
from phalanx.state.txn import Txn

X_K8S = f"podgroup/{keys.GROUP_X_K8S}"
FINAL_FORMS = [forms.KOORDINATOR_ANNOTATIONS, f"podgroup/{keys.GROUP_SIGS}"]
RETRYING_FORMS = [
    X_K8S,
    f"podgroup/{keys.GROUP_VOLCANO}",
    f"podgroup/{keys.GROUP_K8S}",
    forms.LIGHTWEIGHT,
    forms.KUBE_BATCH,
    forms.DELAYED_BINDING,
    forms.CONFIGMAP,
]
GANG = "default/train"


@pytest.fixture
def h(store: StateStore) -> LocalScheduler:
    return LocalScheduler(store)


def split_cluster(h: LocalScheduler) -> None:
    """Three 4-GPU nodes whose other tenants (bound pods) leave 1 + 1 + 2 GPUs free."""
    h.sched.upsert_nodes([model_node(f"n{i}", gpus=4) for i in (1, 2, 3)])
    blockers = [("b1", "n1", 3), ("b2", "n2", 3), ("b3", "n3", 2)]
    h.sched.add_bound_pods([replace(model_pod(name, gpus=g), node_name=n) for name, n, g in blockers])


def free_blockers(h: LocalScheduler, names: list[str], now: float) -> None:
    """The other tenants' pods end (as the cluster feed reports it): their GPUs are free, and the queue hears."""
    freed = FreedCapacity()
    h.sched.release_pods([f"default/{n}" for n in names], freed)
    h.queue.move_all("capacity-freed", now, freed)


def start_gang(h: LocalScheduler, source: str, mode: GangMode = GangMode.STRICT, size: int = 2, gpus: int = 2) -> None:
    h.sched.upsert_gangs([gang_spec("train", size, mode=mode, wait=15, source=source)])
    h.queue.add([model_pod(f"w{i}", "train", gpus=gpus) for i in range(size)], 0)


def gang_hash(h: LocalScheduler) -> dict[str, str]:
    return decoded(h.store.redis.hgetall(h.store.keys.gang(GANG)))


def podgroup_phases(h: LocalScheduler) -> list[str]:
    """The phases reported for the gang's PodGroup, in order."""
    out = []
    for raw in h.store.redis.lrange(h.store.keys.sim_events, 0, -1):
        e = json.loads(raw)
        if e["object"] == f"PodGroup/{GANG}":
            out.append(e["reason"])
    return out


def test_scheduler_plugins_podgroup_backs_off_then_retries_and_binds_whole(h: LocalScheduler) -> None:
    split_cluster(h)
    start_gang(h, X_K8S)
    h.sched.step(0)  # one pod fits (n3), the other nowhere: Strict gives the first back; the wait runs
    assert h.bound() == {} and not h.store.load_pods().keys() - {"default/b1", "default/b2", "default/b3"}
    h.sched.step(15)
    # Released and told so, without the final mark; the PodGroup is Pending again, not Failed.
    assert h.annotations() == {}
    said = h.conditions()["default/w0"]
    assert said.startswith("gang default/train timed out after waiting 15s with 0/2 pods placed (last failure: w1")
    assert said.endswith("; retrying after 10s")
    assert h.conditions()["default/w1"] == said
    assert podgroup_phases(h)[-1] == GangPhase.PENDING and GangPhase.FAILED not in podgroup_phases(h)
    # Redis keeps the backoff: timed out until 25, its timer then.
    record = gang_hash(h)
    assert (record["timed_out"], float(record["retry_at"]), record["timeouts"]) == ("1", 25.0, "1")
    assert h.store.next_timer() == 25.0
    # 6 GPUs are freed during the backoff: the pods are told again to wait for it, nothing binds yet.
    free_blockers(h, ["b1", "b2"], 17)
    h.sched.step(17)
    assert h.bound() == {}
    assert h.sched.gangs.status(GANG) == GangStatus.TIMED_OUT
    # The backoff ends: the gang is tried again with a fresh wait, and binds whole.
    result = h.sched.step(25)
    assert sorted(h.bound()) == ["default/w0", "default/w1"]
    assert result.bound == 2
    record = gang_hash(h)
    assert record["timed_out"] == "0" and "retry_at" not in record
    assert h.store.next_timer() is None


def test_a_gang_still_short_after_its_backoff_times_out_again_with_a_fresh_wait(h: LocalScheduler) -> None:
    split_cluster(h)
    start_gang(h, X_K8S)
    h.sched.step(0)
    h.sched.step(15)
    h.sched.step(25)  # tried again: still only one pod fits, and its new wait starts now
    assert h.sched.gangs.status(GANG) == GangStatus.ACCUMULATING
    assert float(gang_hash(h)["first_wait"]) == 25.0 and h.store.next_timer() == 40.0
    h.sched.step(39.9)
    assert gang_hash(h)["timeouts"] == "1"
    h.sched.step(40)
    assert (gang_hash(h)["timeouts"], float(gang_hash(h)["retry_at"])) == ("2", 50.0)
    assert h.annotations() == {} and h.bound() == {}
    free_blockers(h, ["b1"], 45)
    h.sched.step(50)
    assert sorted(h.bound()) == ["default/w0", "default/w1"]


def test_pods_a_retrying_gang_had_reserved_go_back_to_the_queue_and_bind_after_the_backoff(h: LocalScheduler) -> None:
    """NonStrict: four pods reserved, the fifth does not fit. At the timeout the reserved ones left the queue
    long ago (placed): they are handed back to it, so the retry has all five."""
    split_cluster(h)
    start_gang(h, f"podgroup/{keys.GROUP_VOLCANO}", mode=GangMode.NON_STRICT, size=5, gpus=1)
    h.sched.step(0)
    assert len(h.store.load_pods()) == 3 + 4  # the blockers and four reserved pods
    assert h.queue.queue.counts()["unschedulable"] == 1
    h.sched.step(15)
    assert len(h.store.load_pods()) == 3  # released
    assert h.queue.queue.counts()["unschedulable"] == 5  # all five wait in the queue for the retry
    free_blockers(h, ["b3"], 16)
    h.sched.step(16)
    assert h.bound() == {}
    h.sched.step(25)
    assert sorted(h.bound()) == [f"default/w{i}" for i in range(5)]
    # Volcano: Pending (with its Unschedulable condition) while the gang backed off, never Failed.
    assert GangPhase.FAILED not in podgroup_phases(h)


def test_a_restarted_scheduler_keeps_the_backoff_then_retries(h: LocalScheduler) -> None:
    split_cluster(h)
    start_gang(h, X_K8S)
    h.sched.step(0)
    h.sched.step(15)
    fresh = LocalScheduler(h.store)  # a new process over the same Redis and queue
    fresh.queue = h.queue
    fresh.sched.queue = h.queue
    fresh.sched.recover(16)
    free_blockers(fresh, ["b1", "b2"], 16)
    fresh.sched.step(20)
    assert fresh.bound() == {}  # still backing off, as Redis says
    assert fresh.sched.gangs.status(GANG) == GangStatus.TIMED_OUT
    assert fresh.sched.step(20).next_wakeup == 25.0
    fresh.sched.step(25)
    assert sorted(fresh.bound()) == ["default/w0", "default/w1"]


@pytest.mark.parametrize("source", FINAL_FORMS)
def test_koordinators_forms_stay_timed_out_for_good(h: LocalScheduler, source: str) -> None:
    split_cluster(h)
    start_gang(h, source)
    h.sched.step(0)
    h.sched.step(15)
    ann = h.annotations()
    assert sorted(ann) == ["default/w0", "default/w1"] and all(a[keys.KOORD_TIMEOUT] == "true" for a in ann.values())
    assert h.conditions()["default/w0"].endswith("it will not be scheduled again until its pods are recreated")
    assert podgroup_phases(h)[-1] == GangPhase.FAILED
    assert "retry_at" not in gang_hash(h) and h.store.next_timer() is None
    free_blockers(h, ["b1", "b2"], 16)
    h.queue.add([model_pod(f"w{i}", "train", gpus=2) for i in range(2)], 30)  # even handed out again
    h.sched.step(30)
    h.sched.step(100)
    assert h.bound() == {}


@pytest.mark.parametrize("source", RETRYING_FORMS)
def test_every_other_form_retries(h: LocalScheduler, source: str) -> None:
    split_cluster(h)
    start_gang(h, source)
    h.sched.step(0)
    h.sched.step(15)
    assert h.annotations() == {}
    free_blockers(h, ["b1", "b2"], 16)
    h.sched.step(25)
    assert sorted(h.bound()) == ["default/w0", "default/w1"], source


def test_a_retrying_gang_timed_out_by_an_earlier_version_is_tried_again(h: LocalScheduler) -> None:
    """Before issue 22 every timeout was final: the record says timed out, with no retry time. A pod of a
    retrying form handed out again (the cluster feed no longer holds its mark against it) is scheduled."""
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    h.sched.upsert_gangs([gang_spec("train", 2, wait=15, source=X_K8S)])
    stmt = h.sched.gangs.begin()
    h.sched.gangs.timed_out(GANG, stmt)  # as the earlier version wrote it
    h.store.must_apply(Txn(gang_ops=stmt.ops))
    h.sched.resync()
    assert h.sched.gangs.status(GANG) == GangStatus.TIMED_OUT
    h.queue.add([model_pod(f"w{i}", "train", gpus=2) for i in range(2)], 100)
    h.sched.step(100)
    assert sorted(h.bound()) == ["default/w0", "default/w1"]


def test_the_cluster_feed_holds_the_timeout_mark_only_for_koordinators_forms() -> None:
    def marked(link: str) -> bool:
        b = make_pod("w0").scheduler("phalanx").container().gpu(1).annotation(keys.KOORD_TIMEOUT, "true")
        if link == "koordinator":
            b = b.annotation(keys.KOORD_NAME, "train").annotation(keys.KOORD_MIN_AVAILABLE, "2")
        elif link == "sigs":
            b = b.label(keys.LABEL_SIGS_PODGROUP, "train")
        elif link == "x-k8s":
            b = b.label(keys.LABEL_X_K8S_PODGROUP, "train")
        elif link == "volcano":
            b = b.annotation(keys.VOLCANO_GROUP_NAME, "train")
        elif link == "configmap":
            b = b.label(keys.CONFIGMAP_LABEL, "train")
        return forms.timeout_mark_holds(parse_pod(b.build()))

    assert marked("koordinator") and marked("sigs") and marked("none")
    assert not marked("x-k8s") and not marked("volcano") and not marked("configmap")


def test_volcano_podgroup_of_a_backing_off_gang_is_pending_and_unschedulable() -> None:
    report = GangReport(gang_key=GANG, phase=GangPhase.PENDING, message="timed out", unschedulable=True)
    status = podgroups.status_patch(keys.GROUP_VOLCANO, report, 1.0)["status"]
    assert status["phase"] == "Pending"
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [("Unschedulable", "NotEnoughResources")]
    assert podgroups.status_patch(keys.GROUP_X_K8S, report, 1.0)["status"]["phase"] == "Pending"


@pytest.mark.parametrize("raw", ["-1", "abc", "nan", "inf", ""])
def test_a_bad_retry_backoff_is_refused_naming_the_flag(raw: str, capsys: pytest.CaptureFixture[str]) -> None:
    from phalanx_scheduler.flags import retry_backoff_of

    with pytest.raises(SystemExit) as exc:
        retry_backoff_of(raw)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--gang-retry-backoff (env PHALANX_GANG_RETRY_BACKOFF)" in err and repr(raw) in err


def test_a_retry_backoff_of_zero_retries_at_once(store: StateStore) -> None:
    from phalanx_scheduler.flags import retry_backoff_of

    assert retry_backoff_of("0") == 0.0 and retry_backoff_of("2.5") == 2.5
    h = LocalScheduler(store)
    h.sched.timeouts.retry_backoff = 0.0
    split_cluster(h)
    start_gang(h, X_K8S)
    h.sched.step(0)
    h.sched.step(15)
    free_blockers(h, ["b1", "b2"], 15)
    h.sched.step(15)
    assert sorted(h.bound()) == ["default/w0", "default/w1"]


def test_the_forms_that_retry_are_all_but_koordinators() -> None:
    assert sorted(forms.RETRYING_FORMS) == sorted(RETRYING_FORMS)
    assert all(forms.timeout_is_final(f) for f in [*FINAL_FORMS, "", "bench"])
    assert not any(forms.timeout_is_final(f) for f in RETRYING_FORMS)
