"""Per-role minimums (Volcano's PodGroup spec.minTaskMember): the pure ordering, the intake, the gang
manager's counting, the scheduler's Strict path with surplus pods, and what a restart keeps."""

from __future__ import annotations

import pytest
from builders import gang_spec, make_pod, make_podgroup, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.gang.manager import GangManager
from phalanx.gang.record import GangRecord
from phalanx.gang.roles import pod_role, required_first, role_minimums
from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod
from phalanx.intake.resolver import GangResolver
from phalanx.model import keys
from phalanx.model.objects import GangSpec, Placement, PodInfo
from phalanx.plugins.registry import in_tree_framework
from phalanx.rpc.convert import gang_from_pb, gang_to_pb
from phalanx.rpc.object_checks import gang_errors
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore

VOLCANO = "scheduling.volcano.sh/v1beta1"
ROLE = keys.VOLCANO_TASK_SPEC


def spec(minimum: int, roles: dict[str, int], **extra: object) -> GangSpec:
    s = gang_spec("job", minimum, wait=100)
    s.min_task_member = dict(roles)
    for name, value in extra.items():
        setattr(s, name, value)
    return s


def role_pod(name: str, role: str, *, gpus: int = 1, selector: bool = True) -> PodInfo:
    """A pod of gang default/job whose role is `role`, kept by a node selector to nodes of its role."""
    p = model_pod(name, "job", gpus=gpus)
    p.annotations[ROLE] = role
    if selector:
        p.placement = Placement(node_selector=(("role", role),))
    return p


# --- the ordering (pure) --------------------------------------------------------------------------------


def test_required_first_puts_each_roles_minimum_first_in_role_order_then_the_rest_as_given() -> None:
    items = ["w0", "x", "w1", "m0", "w2", "m1"]
    role = {"w0": "worker", "w1": "worker", "w2": "worker", "m0": "master", "m1": "master", "x": ""}
    ordered = required_first(spec(3, {"worker": 2, "master": 1}), items, role.__getitem__)
    assert ordered == ["m0", "w0", "w1", "x", "w2", "m1"]


def test_required_first_counts_what_the_gang_already_has() -> None:
    items = ["w0", "w1", "m0"]
    role = {"w0": "worker", "w1": "worker", "m0": "master"}
    assert required_first(spec(3, {"worker": 2, "master": 1}), items, role.__getitem__, {"worker": 1}) == [
        "m0",
        "w0",
        "w1",
    ]
    assert required_first(spec(3, {"worker": 2, "master": 1}), items, role.__getitem__, {"master": 1}) == items


def test_required_first_keeps_the_order_without_role_minimums_that_apply() -> None:
    items = ["w0", "m0"]
    role = {"w0": "worker", "m0": "master"}
    assert required_first(spec(2, {}), items, role.__getitem__) == items
    # Volcano ignores minimums that add up to more than minMember, and roles of 0.
    assert required_first(spec(2, {"master": 2, "worker": 1}), items, role.__getitem__) == items
    assert role_minimums(spec(2, {"master": 2, "worker": 1})) == {}
    assert role_minimums(spec(2, {"master": 1, "worker": 0})) == {"master": 1}
    # A role minimum no pod has: nothing to put first.
    assert required_first(spec(2, {"ps": 1}), items, role.__getitem__) == items


def test_a_pods_role_is_its_annotation_else_its_label() -> None:
    p = model_pod("w0", "job")
    assert pod_role(p) == ""
    p.labels[ROLE] = "worker"
    assert pod_role(p) == "worker"
    p.annotations[ROLE] = "master"
    assert pod_role(p) == "master"


# --- the intake -----------------------------------------------------------------------------------------


def volcano_podgroup(min_task_member: object) -> dict[str, object]:
    return make_podgroup("job", api_version=VOLCANO).min_member(2).set("spec.minTaskMember", min_task_member).build()


def test_volcano_min_task_member_reaches_the_gang_spec() -> None:
    resolver = GangResolver()
    resolver.add_object(volcano_podgroup({"master": 1, "worker": 1, "ps": 0}), created_at=0)
    pod = parse_pod(make_pod("w0").annotation(keys.VOLCANO_GROUP_NAME, "job").annotation(ROLE, "worker").build())
    resolved = resolver.resolve(pod).spec
    assert resolved is not None
    assert resolved.min_task_member == {"master": 1, "worker": 1, "ps": 0}
    # The pod keeps the annotation the role is read from.
    assert pod_role(pod) == "worker"


def test_min_task_member_above_min_member_is_accepted_as_volcano_accepts_it() -> None:
    resolver = GangResolver()
    resolver.add_object(volcano_podgroup({"master": 2, "worker": 2}), created_at=0)
    resolved = resolver.gang("default/job")
    assert resolved is not None and not resolved.invalid
    assert resolved.min_task_member == {"master": 2, "worker": 2}
    assert role_minimums(resolved) == {}


def test_other_podgroups_have_no_min_task_member() -> None:
    resolver = GangResolver()
    podgroup = make_podgroup("job").min_member(2).set("spec.minTaskMember", {"master": -1}).build()
    resolver.add_object(podgroup, created_at=0)
    resolved = resolver.gang("default/job")
    assert resolved is not None and resolved.min_task_member == {}


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ({"master": -1}, "spec.minTaskMember[master]", "-1 is negative (at least 0)"),
        ({"master": "1"}, "spec.minTaskMember[master]", '"1" is not an integer'),
        ({"master": 1.5}, "spec.minTaskMember[master]", "1.5 is not an integer"),
        ({"master": True}, "spec.minTaskMember[master]", "True is not an integer"),
        ({"master": None}, "spec.minTaskMember[master]", "None is not an integer"),
        ({"master": 2**31}, "spec.minTaskMember[master]", "2147483648 is too large (at most 2147483647)"),
        ({"": 1}, "spec.minTaskMember", 'role "" is not a task name'),
        ({1: 1}, "spec.minTaskMember", "role 1 is not a task name"),
        ({"r" * 400: 1}, "spec.minTaskMember", "is too long (at most 317 characters)"),
        (["master"], "spec.minTaskMember", "expected a mapping, got list"),
    ],
)
def test_invalid_min_task_member_names_the_podgroup_and_field(value: object, field: str, message: str) -> None:
    with pytest.raises(IntakeError) as caught:
        GangResolver().add_object(volcano_podgroup(value), created_at=0)
    assert str(caught.value).startswith(f"PodGroup default/job: {field}: ")
    assert message in caught.value.message


# --- the wire and Redis ---------------------------------------------------------------------------------


def test_min_task_member_crosses_protobuf() -> None:
    s = spec(2, {"master": 1, "worker": 1})
    assert gang_from_pb(gang_to_pb(s)).min_task_member == {"master": 1, "worker": 1}
    assert gang_from_pb(gang_to_pb(spec(2, {}))).min_task_member == {}


def test_min_task_member_on_the_wire_is_checked() -> None:
    m = gang_to_pb(spec(2, {"master": 1}))
    m.min_task_member["worker"] = -2
    m.min_task_member[""] = 1
    errors = gang_errors(m, "gangs[0]")
    assert "gangs[0].min_task_member['worker']: -2 is negative" in errors
    assert "gangs[0].min_task_member: role '' must have 1 to 317 characters" in errors


def test_min_task_member_is_kept_in_redis(store: StateStore) -> None:
    store.put_gangs([spec(2, {"master": 1, "worker": 1})])
    assert store.load_gangs()["default/job"].min_task_member == {"master": 1, "worker": 1}


# --- the gang manager -------------------------------------------------------------------------------------


def manager(s: GangSpec, **record: object) -> GangManager:
    gm = GangManager(60)
    gm.upsert(s)
    gm.records[s.key] = GangRecord(s.key, **record)  # type: ignore[arg-type]
    return gm


def test_the_minimum_needs_every_roles_minimum_besides_min_available() -> None:
    roles = {"default/w0": "worker", "default/w1": "worker", "default/m0": "master"}
    s = spec(2, {"master": 1, "worker": 1})
    assert not manager(s, assumed={"default/w0", "default/w1"}, roles=roles).reached_minimum("default/job")
    assert manager(s, assumed={"default/w0", "default/m0"}, roles=roles).reached_minimum("default/job")
    # Bound pods count too (once-satisfied, before its first bind: pods found bound).
    assert manager(s, assumed={"default/w0"}, bound={"default/m0"}, roles=roles).reached_minimum("default/job")
    # Pods being placed count as waiting.
    gm = manager(s, assumed={"default/w0"}, roles=roles)
    assert not gm.reached_minimum("default/job", [role_pod("w1", "worker")])
    assert gm.reached_minimum("default/job", [role_pod("m0", "master")])
    assert gm.describe("default/job") == "gang default/job: 1/2 pods placed (master 0/1, worker 1/1)"


def test_roles_count_by_match_policy() -> None:
    roles = {"default/w0": "worker", "default/m0": "master"}
    s = spec(2, {"master": 1, "worker": 1}, match_policy="only-waiting")
    gm = manager(s, assumed={"default/w0"}, bound={"default/m0"}, roles=roles, satisfied_at=1.0)
    assert not gm.reached_minimum("default/job")  # the bound master does not count: a new master is needed
    assert not gm.reached_minimum("default/job", [role_pod("w1", "worker")])
    assert gm.reached_minimum("default/job", [role_pod("m1", "master")])


def test_the_manager_orders_a_unit_and_notes_the_roles_of_its_pods() -> None:
    gm = manager(spec(2, {"master": 1, "worker": 1}))
    unit = [role_pod("w0", "worker"), role_pod("w1", "worker"), role_pod("m0", "master"), model_pod("x", "job")]
    ordered = gm.required_first("default/job", unit, lambda p: p)
    assert [p.name for p in ordered] == ["m0", "w0", "w1", "x"]
    assert gm.records["default/job"].roles == {"default/w0": "worker", "default/w1": "worker", "default/m0": "master"}
    # A gang without role minimums is left as it is, and nothing is noted.
    plain = manager(gang_spec("job", 2))
    assert plain.required_first("default/job", unit, lambda p: p) == unit
    assert plain.records["default/job"].roles == {}


# --- through the scheduler --------------------------------------------------------------------------------


@pytest.fixture
def h(store: StateStore) -> LocalScheduler:
    return LocalScheduler(store)


def role_nodes() -> list:
    """One node per role, each with room for one pod."""
    return [model_node(f"n-{r}", gpus=1, labels={"role": r}) for r in ("master", "worker")]


def test_one_master_and_one_worker_bind_though_the_other_workers_fit_nowhere(h: LocalScheduler) -> None:
    """Volcano binds one master and one worker: Strict, minMember 2, minTaskMember {master: 1, worker: 1}, three
    workers whose names come before the master's, and room for one pod of each role."""
    h.sched.upsert_nodes(role_nodes())
    h.sched.upsert_gangs([spec(2, {"master": 1, "worker": 1})])
    pods = [role_pod("job-0", "worker"), role_pod("job-1", "worker"), role_pod("job-2", "worker")]
    h.queue.add([*pods, role_pod("job-3", "master")], 0)
    h.sched.step(0)
    assert h.bound() == {"default/job-3": "n-master", "default/job-0": "n-worker"}
    assert "Insufficient nvidia.com/gpu" in h.conditions()["default/job-1"]
    assert "Strict" not in h.conditions()["default/job-1"]


def test_a_role_below_its_minimum_still_fails_the_gang_under_strict(h: LocalScheduler) -> None:
    """Two workers fit and make min_available, but the master fits nowhere: nothing is held."""
    h.sched.upsert_nodes([model_node("n-worker", gpus=2, labels={"role": "worker"})])
    h.sched.upsert_gangs([spec(2, {"master": 1, "worker": 1})])
    h.queue.add([role_pod("job-0", "worker"), role_pod("job-1", "worker"), role_pod("job-2", "master")], 0)
    h.sched.step(0)
    assert h.bound() == {}
    assert h.store.load_pods() == {}
    assert "Strict mode released" in h.conditions()["default/job-0"]


def test_without_the_master_the_workers_wait_for_it(h: LocalScheduler) -> None:
    h.sched.upsert_nodes(role_nodes() + [model_node("n-worker-2", gpus=1, labels={"role": "worker"})])
    h.sched.upsert_gangs([spec(2, {"master": 1, "worker": 1})])
    h.queue.add([role_pod("job-0", "worker"), role_pod("job-1", "worker")], 0)
    h.sched.step(0)
    assert h.bound() == {}
    assert len(h.store.load_pods()) == 2  # min_available is met, the master's minimum is not
    assert "(master 0/1, worker 2/1)" in h.conditions()["default/job-0"]
    h.queue.add([role_pod("job-2", "master")], 1)
    h.sched.step(1)
    assert sorted(h.bound()) == ["default/job-0", "default/job-1", "default/job-2"]


def test_a_restart_rebuilds_the_roles_of_reserved_pods_from_redis(h: LocalScheduler, store: StateStore) -> None:
    h.sched.upsert_nodes([model_node("n-master", gpus=1, labels={"role": "master"})])
    h.sched.upsert_nodes([model_node("n-worker", gpus=2, labels={"role": "worker"})])
    h.sched.upsert_gangs([spec(3, {"master": 1, "worker": 2})])
    h.queue.add([role_pod("m0", "master"), role_pod("w0", "worker")], 0)
    h.sched.step(0)
    assert len(store.load_pods()) == 2 and h.bound() == {}
    # A new scheduler process: memory gone, Redis and the queue remain.
    fresh = GangScheduler(store, h.queue, h.binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=60))
    fresh.recover(1)
    assert fresh.gangs.records["default/job"].roles == {"default/m0": "master", "default/w0": "worker"}
    h.queue.add([role_pod("w1", "worker")], 1)
    fresh.step(1)
    assert sorted(h.bound()) == ["default/m0", "default/w0", "default/w1"]
