"""The gang rules, driven through the scheduling logic with a real Redis and in-process queue and binder."""

from __future__ import annotations

from typing import Any

import pytest
from builders import GPU, gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.model.objects import GangMode, PodInfo
from phalanx.plugins.registry import in_tree_framework
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore

node, pod, gang = model_node, model_pod, gang_spec  # short names: the tests below build many


@pytest.fixture
def h(store: StateStore) -> LocalScheduler:
    return LocalScheduler(store)


def test_gang_binds_all_at_once_when_it_fits(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4), node("n2", gpus=4)])
    h.sched.upsert_gangs([gang("train", 6)])
    h.queue.add([pod(f"w{i}", "train", gpus=1) for i in range(6)], 0)
    h.sched.step(0)
    assert sorted(h.bound()) == [f"default/w{i}" for i in range(6)]


def test_seed003_deadlock_nothing_binds_and_all_annotated_at_timeout(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("gpu-pg", 5, wait=20)])
    h.queue.add([pod(f"w{i}", "gpu-pg", gpus=1) for i in range(5)], 0)
    r = h.sched.step(0)
    assert h.bound() == {}
    assert r.next_wakeup == pytest.approx(20.0)
    assert "Strict" in h.conditions()["default/w4"]
    # Nothing is held while it waits: the gang's reservations were released.
    assert not h.store.load_pods()
    h.sched.step(19.9)
    assert h.annotations() == {}
    h.sched.step(20.0)
    ann = h.annotations()
    assert sorted(ann) == [f"default/w{i}" for i in range(5)]
    assert all(a[KOORD_TIMEOUT] == "true" for a in ann.values())
    # Timed out: never scheduled again, even when capacity appears.
    h.sched.upsert_nodes([node("n2", gpus=8)])
    h.queue.add([pod(f"w{i}", "gpu-pg", gpus=1) for i in range(5)], 21)
    h.sched.step(21)
    assert h.bound() == {}


def test_interleaved_gangs_one_binds_whole_other_waits_whole(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=3)])
    h.sched.upsert_gangs([gang("a", 3), gang("b", 3)])
    pods = []
    for i in range(3):  # created interleaved, as two controllers would
        pods.append(pod(f"a{i}", "a", gpus=1, created=1.0))
        pods.append(pod(f"b{i}", "b", gpus=1, created=2.0))
    h.queue.add(pods, 0)
    h.sched.step(0)
    assert sorted(h.bound()) == ["default/a0", "default/a1", "default/a2"]
    assert all("b" not in k.split("/")[1] for k in h.bound())


def test_nonstrict_keeps_accumulating_after_a_failure(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=2)])
    h.sched.upsert_gangs([gang("ns", 3, mode=GangMode.NON_STRICT, wait=100)])
    h.queue.add([pod(f"w{i}", "ns", gpus=1) for i in range(3)], 0)
    h.sched.step(0)
    assert h.bound() == {}
    held = h.store.load_pods()
    assert len(held) == 2 and all(r.state == "assumed" for r in held.values())
    h.sched.upsert_nodes([node("n2", gpus=1)])
    h.queue.queue.move_all(1)
    h.sched.step(1)
    assert len(h.bound()) == 3


def test_strict_releases_earlier_reservations_when_a_later_pod_fails(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=2)])
    h.sched.upsert_gangs([gang("s", 3, wait=100)])
    h.queue.add([pod("w0", "s", gpus=1), pod("w1", "s", gpus=1)], 0)
    h.sched.step(0)
    assert len(h.store.load_pods()) == 2
    h.queue.add([pod("w2", "s", gpus=1)], 1)
    h.sched.step(1)
    assert h.store.load_pods() == {}
    assert h.bound() == {}


def test_gang_group_binds_only_when_every_gang_is_ready(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    group = ("ns-a/ga", "ns-b/gb")
    h.sched.upsert_gangs(
        [gang("ga", 2, groups=group, ns="ns-a", wait=50), gang("gb", 2, groups=group, ns="ns-b", wait=50)]
    )
    h.queue.add([pod("a0", "ga", gpus=1, ns="ns-a"), pod("a1", "ga", gpus=1, ns="ns-a")], 0)
    h.sched.step(0)
    assert h.bound() == {}
    assert len(h.store.load_pods()) == 2
    h.queue.add([pod("b0", "gb", gpus=1, ns="ns-b"), pod("b1", "gb", gpus=1, ns="ns-b")], 1)
    h.sched.step(1)
    assert sorted(h.bound()) == ["ns-a/a0", "ns-a/a1", "ns-b/b0", "ns-b/b1"]


def test_gang_group_that_cannot_complete_releases_everything_at_timeout(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=3)])
    group = ("default/ga", "default/gb")
    h.sched.upsert_gangs([gang("ga", 2, groups=group, wait=30), gang("gb", 2, groups=group, wait=30)])
    h.queue.add([pod("a0", "ga", gpus=1), pod("a1", "ga", gpus=1), pod("b0", "gb", gpus=1), pod("b1", "gb", gpus=1)], 0)
    h.sched.step(0)
    assert h.bound() == {}
    h.sched.step(30)
    assert h.store.load_pods() == {}
    ann = h.annotations()
    assert {"default/a0", "default/a1", "default/b0", "default/b1"} <= set(ann)


def test_once_satisfied_later_pods_schedule_as_ordinary_pods(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("g", 2, total=4)])
    h.queue.add([pod("w0", "g", gpus=1), pod("w1", "g", gpus=1)], 0)
    h.sched.step(0)
    assert len(h.bound()) == 2
    h.queue.add([pod("w2", "g", gpus=1)], 5)
    h.sched.step(5)
    assert "default/w2" in h.bound()


def test_undeclared_gang_waits_with_reason_then_schedules(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.queue.add([pod("w0", "late", gpus=1), pod("w1", "late", gpus=1)], 0)
    h.sched.step(0)
    assert "not declared yet" in h.conditions()["default/w0"]
    h.sched.upsert_gangs([gang("late", 2)])
    h.queue.queue.move_all(1)
    h.sched.step(1)
    assert len(h.bound()) == 2


def test_min_resources_larger_than_free_capacity_assumes_nothing(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    spec = gang("big", 1, wait=100)
    spec.min_resources = {GPU: 8000}
    h.sched.upsert_gangs([spec])
    h.queue.add([pod("w0", "big", gpus=1)], 0)
    h.sched.step(0)
    assert h.store.load_pods() == {}
    assert "minResources needs 8 nvidia.com/gpu, the cluster has 4 free" in h.conditions()["default/w0"]


def test_ordinary_pods_schedule_one_at_a_time(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=1)])
    h.queue.add([pod("p0", gpus=1, created=0), pod("p1", gpus=1, created=1)], 0)
    h.sched.step(0)
    assert list(h.bound()) == ["default/p0"]
    assert "Insufficient nvidia.com/gpu" in h.conditions()["default/p1"]


def test_restart_recovers_gang_progress_from_redis(h: LocalScheduler, store: StateStore) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("g", 3, wait=100)])
    h.queue.add([pod("w0", "g", gpus=1), pod("w1", "g", gpus=1)], 0)
    h.sched.step(0)
    assert len(store.load_pods()) == 2
    # A new scheduler process: memory gone, Redis and the queue remain.
    fresh = GangScheduler(store, h.queue, h.binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=60))
    fresh.recover(1)
    assert fresh.gangs.placed_count("default/g") == 2
    h.queue.add([pod("w2", "g", gpus=1)], 1)
    fresh.step(1)
    assert sorted(h.bound()) == ["default/w0", "default/w1", "default/w2"]
    used = store.load_used()
    assert used[("n1", GPU)] == 3000


def share_pod(name: str, share_milli: int, created: float = 0.0) -> PodInfo:
    return PodInfo(
        "default",
        name,
        uid=name,
        created_at=created,
        requests={"cpu": 100, "pods": 1000, "phalanx.dev/gpu-share": share_milli},
    )


def test_gpu_shares_are_placed_per_device_never_split_across_gpus(h: LocalScheduler) -> None:
    # Two GPUs: three 60% shares cannot all fit (each GPU holds one), though 1.8 < 2 GPUs in aggregate.
    h.sched.upsert_nodes([node("n1", gpus=2)])
    h.queue.add([share_pod(f"s{i}", 600, created=i) for i in range(3)], 0)
    h.sched.step(0)
    assert sorted(h.bound()) == ["default/s0", "default/s1"]
    assert h.conditions()["default/s2"] == "0/1 nodes are available: 1 node(s) had no GPU with 0.6 of it free"
    used = h.store.load_used()
    assert used[("n1", "phalanx.dev/gpu-device-0")] == 600 and used[("n1", "phalanx.dev/gpu-device-1")] == 600


def test_a_share_fills_a_used_gpu_before_breaking_a_free_one(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=2)])
    h.queue.add([share_pod("a", 500, created=0), share_pod("b", 300, created=1), pod("whole", gpus=1, created=2)], 0)
    h.sched.step(0)
    # Best fit put both shares on one device, so a whole GPU is still free for the last pod.
    assert sorted(h.bound()) == ["default/a", "default/b", "default/whole"]
    used = h.store.load_used()
    devices = sorted(used.get(("n1", f"phalanx.dev/gpu-device-{i}"), 0) for i in range(2))
    assert devices == [800, 1000]


def test_a_whole_gpu_pod_does_not_take_a_device_a_share_uses(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([node("n1", gpus=1)])
    h.queue.add([share_pod("a", 100, created=0), pod("whole", gpus=1, created=1)], 0)
    h.sched.step(0)
    assert list(h.bound()) == ["default/a"]
    h.sched.release_pods(["default/a"])
    h.queue.queue.move_all(1)
    h.sched.step(1)
    assert "default/whole" in h.bound()


def test_forgetting_gangs_keeps_one_with_reservations_and_clears_the_rest_everywhere(
    h: LocalScheduler, store: StateStore
) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("done", 1), gang("waiting", 3, wait=100)])
    h.queue.add([pod("d0", "done", gpus=1), pod("w0", "waiting", gpus=1)], 0)
    h.sched.step(0)
    assert "default/d0" in h.bound() and "default/w0" in h.sched.assumed
    h.sched.release_pods(["default/d0"])  # the finished job's pod was deleted

    assert h.sched.forget_gangs(["default/done", "default/waiting"]) == ["default/done"]
    assert "default/done" not in store.gang_keys_with_state()
    assert "default/done" not in h.sched.gangs.records and "default/done" not in h.sched.gangs.specs
    # The gang with a reservation is untouched: its timer and record are still there.
    assert "default/waiting" in store.gang_keys_with_state()
    assert store.redis.zscore(store.keys.timers, "default/waiting") == pytest.approx(100.0)
    # A pod naming the forgotten gang again starts it afresh: min 2 now, so one pod alone waits.
    h.sched.upsert_gangs([gang("done", 2)])
    h.queue.add([pod("d1", "done", gpus=1)], 10)
    h.sched.step(10)
    assert "default/d1" not in h.bound() and "default/d1" in h.sched.assumed


def test_a_placed_pods_reservation_is_written_once_on_the_snapshot(h: LocalScheduler, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One tentative state per attempt (scheduling/attempt.py): a gang placed whole holds each pod's capacity
    once, with no undo and reserve-again around the commit; a Strict failure undoes exactly what it held."""
    from phalanx.framework.snapshot import Snapshot

    writes: list[tuple[str, int]] = []
    real = Snapshot.reserve

    def spy(self, i, requests, sign=1, pod=None):  # type: ignore[no-untyped-def]
        writes.append((pod.key if pod is not None else "", sign))
        return real(self, i, requests, sign=sign, pod=pod)

    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("train", 3)])
    monkeypatch.setattr(Snapshot, "reserve", spy)
    h.queue.add([pod(f"w{i}", "train", gpus=1) for i in range(3)], 0)
    h.sched.step(0)
    assert sorted(h.bound()) == [f"default/w{i}" for i in range(3)]
    assert sorted(writes) == [(f"default/w{i}", 1) for i in range(3)]

    writes.clear()
    h.sched.upsert_gangs([gang("big", 3)])
    h.queue.add([pod("b0", "big", gpus=1), pod("b1", "big", gpus=2)], 1)  # b1 cannot fit: Strict fails
    h.sched.step(1)
    assert writes == [("default/b0", 1), ("default/b0", -1)]


def record_pops(h: LocalScheduler) -> list[int]:
    """The pods each pop of `h`'s queue asks for, in order."""
    asked: list[int] = []
    pop = h.queue.pop

    def recording_pop(max_pods: int, now: float, carry: Any = None, wait_seconds: float = 0.0) -> Any:
        asked.append(max_pods)
        return pop(max_pods, now, carry, wait_seconds)

    h.queue.pop = recording_pop  # type: ignore[method-assign]
    return asked


def test_pops_start_small_after_a_lull_and_double_up_to_the_batch(store: StateStore) -> None:
    """A round's gangs go to the binder once the round is placed: the first pop after the queue ran dry asks
    for first_pop pods, so the first bindings leave early; each pop that finds pods doubles the next."""
    h = LocalScheduler(store)
    asked = record_pops(h)
    h.sched = GangScheduler(store, h.queue, h.binder, in_tree_framework(), SchedulerSettings(pop_batch=16, first_pop=2))
    h.sched.upsert_nodes([node("n1", gpus=64)])
    h.queue.add([pod(f"p{i:02d}", "", gpus=1) for i in range(40)], 0)
    h.sched.step(0)
    assert len(h.bound()) == 40
    assert asked == [2, 4, 8, 16, 16, 16]  # 2+4+8+16 = 30, then the last 10, then an empty pop
    h.queue.add([pod("late", "", gpus=1)], 1)
    assert h.sched.wait_for_work(1, 0.0) is not None and asked[-1] == 2  # after the empty pop: small again


def test_without_first_pop_every_pop_asks_the_whole_batch(h: LocalScheduler) -> None:
    asked = record_pops(h)
    h.sched.upsert_nodes([node("n1", gpus=8)])
    h.queue.add([pod(f"p{i}", "", gpus=1) for i in range(3)], 0)
    h.sched.step(0)
    assert asked == [256, 256]
