"""Which gang a pod belongs to, and that gang's parameters, from every declaration form at once.

Pods and gang objects arrive in any order (a Job's pods often reach the scheduler before its PodGroup),
so the resolver keeps the objects it was given and answers "waiting for ..." until the one a pod names
exists. Its answers depend only on the calls made, in order: no clock, no randomness.

A gang is defined by the first pod seen with a valid declaration (Koordinator initialises a gang once,
the same way): its form decides whether the gang is self-contained or read from an object, and its
Koordinator annotations are the overrides applied to that object. Later pods of the same gang key join
it; their own annotations are still validated, so a pod with a typo is refused rather than ignored.
So when one name is declared both ways (pod annotations and an object), the first pod's form decides.

A scheduling.k8s.io PodGroup with the basic policy declares no gang: the pods naming it wait for it like for
any PodGroup (kube-scheduler does too), then are scheduled one by one, as pods of no gang.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.intake.errors import IntakeError
from phalanx.intake.gang_objects import is_gang_object as _is_gang_object
from phalanx.intake.gang_objects import object_ref, read_gang_object
from phalanx.intake.gang_shapes import GangLink, GangParams, ObjectRef
from phalanx.intake.gangs import build_spec, find_link, invalid_spec, read_link
from phalanx.model.objects import GangSpec, PodInfo


@dataclass
class Resolution:
    gang_key: str  # "" when the pod belongs to no gang
    spec: GangSpec | None  # None while the PodGroup/ConfigMap is missing or the declaration is invalid
    waiting_for: str  # e.g. 'PodGroup default/train (scheduling.x-k8s.io) does not exist yet', else ""
    error: str  # why the pod's gang declaration is refused, else ""


@dataclass(frozen=True, slots=True)
class _StoredObject:
    params: GangParams
    created_at: float
    invalid: str = ""
    gang: bool = True  # False: it declares no gang (a scheduling.k8s.io PodGroup with the basic policy)


_NO_GANG = Resolution("", None, "", "")


class GangResolver:
    def __init__(self, default_wait_seconds: float | None = None) -> None:
        self._default_wait = default_wait_seconds
        self._objects: dict[ObjectRef, _StoredObject] = {}
        # gang key -> the objects recorded under it, first added first (as `_objects` orders them): looking a
        # gang's objects up scanned every object, and a rebuild looks up each PodGroup (10,000 PodGroups whose
        # pods are gone: 10^8 steps).
        self._refs: dict[str, list[ObjectRef]] = {}
        self._links: dict[str, GangLink] = {}  # gang key -> declaration of the first valid pod
        self._first_pod_created: dict[str, float] = {}  # gang key -> created_at of that pod
        # gang key -> (the link, the object it read, the spec built from them): a gang's later pods get the
        # same spec while neither changed (a rebuild resolves 30,000 bound pods, three of a gang).
        self._specs: dict[str, tuple[GangLink, _StoredObject | float | None, GangSpec | None]] = {}

    @staticmethod
    def is_gang_object(obj: Mapping[str, Any]) -> bool:
        """A PodGroup of a known API group, or a ConfigMap whose data has minAvailable."""
        return _is_gang_object(obj)

    def add_object(self, obj: Mapping[str, Any], *, created_at: float) -> str:
        """Record (or replace) a PodGroup or gang ConfigMap; returns its gang key.

        An invalid object is still recorded, as an invalid gang, so its pods are refused with the reason
        instead of waiting forever; then the IntakeError is raised for the caller to report.
        """
        ref = object_ref(obj)
        try:
            params = read_gang_object(obj, ref)
            if params is not None:
                self._object_spec(ref, params, created_at)  # checks across fields, e.g. total below min
        except IntakeError as exc:
            self._store(ref, _StoredObject(GangParams(), created_at, invalid=str(exc)))
            raise
        if params is None:
            self._store(ref, _StoredObject(GangParams(), created_at, gang=False))
        else:
            self._store(ref, _StoredObject(params, created_at))
        return ref.key

    def _store(self, ref: ObjectRef, stored: _StoredObject) -> None:
        if ref not in self._objects:
            self._refs.setdefault(ref.key, []).append(ref)
        self._objects[ref] = stored

    def remove_object(self, kind: str, namespace: str, name: str) -> str | None:
        """Forget a gang object; `kind` is "PodGroup", "PodGroup.<api group>" or "ConfigMap".

        Returns the gang key it declared, or None when no such object was recorded. Its pods go back to
        waiting for it.
        """
        wanted_kind, _, wanted_group = kind.partition(".")
        key = f"{namespace}/{name}"
        refs = self._refs.get(key, [])
        removed = [
            ref
            for ref in refs  # each names this namespace and name
            if ref.kind.lower() == wanted_kind.lower() and (not wanted_group or ref.group == wanted_group)
        ]
        for ref in removed:
            del self._objects[ref]
            refs.remove(ref)
        if not refs:
            self._refs.pop(key, None)
        return key if removed else None

    def has_object(self, key: str) -> bool:
        """Whether a PodGroup or ConfigMap declaring this gang is recorded."""
        return any(self._objects[ref].gang for ref in self._refs.get(key, ()))

    def forget_link(self, key: str) -> None:
        """The gang has no pods left: the next pod that names it declares it again (its own annotations,
        its own creation time), as for a gang never seen."""
        self._links.pop(key, None)
        self._first_pod_created.pop(key, None)
        self._specs.pop(key, None)

    def resolve(self, pod: PodInfo) -> Resolution:
        site = find_link(pod)
        if site is None:
            return _NO_GANG
        key = f"{pod.namespace}/{site.name}"
        try:
            link = read_link(pod, site)
            if link.ref is None:
                # A self-contained declaration must be complete and consistent on this very pod.
                self._self_contained_spec(pod.namespace, link, pod.created_at)
        except IntakeError as exc:
            return Resolution(key, None, "", str(exc))
        if key not in self._links:
            self._links[key] = link
            self._first_pod_created[key] = pod.created_at
        defining = self._links[key]
        if defining.ref is not None and defining.ref not in self._objects:
            return Resolution(key, None, f"{defining.ref.describe()} does not exist yet", "")
        if defining.ref is not None and not self._objects[defining.ref].gang:
            self.forget_link(key)  # no gang to remember a declaration for
            return _NO_GANG
        spec = self._linked_spec(key, defining)
        if spec is None:  # pragma: no cover - excluded by the check just above
            return Resolution(key, None, "", "")
        if spec.invalid:
            return Resolution(key, None, "", spec.invalid)
        return Resolution(key, spec, "", "")

    def gang(self, key: str) -> GangSpec | None:
        """The gang's spec (with `invalid` set when unusable); None when nothing declares it yet."""
        link = self._links.get(key)
        if link is not None:
            return self._linked_spec(key, link)
        # No pod seen yet: the object alone, the most recently added one if several kinds share the key.
        for ref in reversed(self._refs.get(key, ())):
            if self._objects[ref].gang:
                return self._stored_object_spec(ref, self._objects[ref], GangParams())
        return None

    def _linked_spec(self, key: str, link: GangLink) -> GangSpec | None:
        """The spec `link` gives the gang: built once per version of the link and of what it reads (the
        object it names, or the first pod's creation time), as both are replaced, never changed, when they
        change. Callers share it and do not change it."""
        source = self._first_pod_created[key] if link.ref is None else self._objects.get(link.ref)
        memo = self._specs.get(key)
        if memo is not None and memo[0] is link and memo[1] is source:
            return memo[2]
        spec = self._build_linked_spec(key, link)
        self._specs[key] = (link, source, spec)
        return spec

    def _build_linked_spec(self, key: str, link: GangLink) -> GangSpec | None:
        namespace = key.partition("/")[0]
        if link.ref is None:
            return self._self_contained_spec(namespace, link, self._first_pod_created[key])
        stored = self._objects.get(link.ref)
        if stored is None or not stored.gang:
            return None
        return self._stored_object_spec(link.ref, stored, link.params)

    def _self_contained_spec(self, namespace: str, link: GangLink, created_at: float) -> GangSpec:
        return build_spec(
            namespace,
            link.name,
            link.params,
            source=link.source,
            created_at=created_at,
            default_wait_seconds=self._default_wait,
            min_field=link.min_field,
        )

    def _stored_object_spec(self, ref: ObjectRef, stored: _StoredObject, overrides: GangParams) -> GangSpec:
        if stored.invalid:
            return invalid_spec(
                ref.namespace, ref.name, source=ref.source, created_at=stored.created_at, reason=stored.invalid
            )
        try:
            return self._object_spec(ref, stored.params.overridden_by(overrides), stored.created_at)
        except IntakeError as exc:
            # The pod's overrides contradict the object (e.g. min-available above its total-number).
            return invalid_spec(
                ref.namespace, ref.name, source=ref.source, created_at=stored.created_at, reason=str(exc)
            )

    def _object_spec(self, ref: ObjectRef, params: GangParams, created_at: float) -> GangSpec:
        return build_spec(
            ref.namespace,
            ref.name,
            params,
            source=ref.source,
            created_at=created_at,
            default_wait_seconds=self._default_wait,
        )
