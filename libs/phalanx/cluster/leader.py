"""Leader election among scheduler replicas on a coordination.k8s.io/v1 Lease, as kube-scheduler does it
(client-go's leaderelection), and the fencing term that makes a deposed leader's writes harmless.

The Lease's spec is the election record: holderIdentity, leaseDurationSeconds, acquireTime, renewTime,
leaseTransitions. Every write is a replace carrying the resourceVersion that was read (optimistic
concurrency: of two replicas racing for it, one gets 409 Conflict), exactly like client-go:
- a standby reads the Lease every retry period (with jitter) and takes it when it is free (no holder: the
  last leader released it), or when its record has not changed for leaseDurationSeconds of this process's
  own clock (no clock comparison between machines), or when its holder is an earlier incarnation of this
  very pod (same pod name: a pod runs one scheduler container at a time, so that holder is dead);
  taking it from someone else increments leaseTransitions;
- the leader renews it every retry period; if no renewal succeeds for renewDeadline, or the Lease shows
  another holder, leadership is lost: scheduling stops and the process exits (kube-scheduler does the
  same; the container restarts as a standby).
- a leader that shuts down gracefully releases the Lease (no holder, duration 1 s): a standby takes over
  at its next retry instead of waiting the duration out.

The fencing term of a leader is the Lease's leaseTransitions after its acquisition: it grows at every
change of holder. The new leader raises the term kept in Redis to it (compare-and-raise; if the Lease was
deleted and recreated, its count restarted, and the leader first raises leaseTransitions above the term
in Redis), and every scheduler write to Redis carries it: lua/txn.lua refuses a write whose term is older
(FencedOut). A leader that is paused past its Lease, or cut off from the API server, and carries on
believing it leads cannot commit anything once its successor has claimed its term.

Timing (defaults as kube-scheduler's): leaseDuration 15 s > renewDeadline 10 s > 1.2 x retryPeriod 2 s.
A crashed leader is replaced after leaseDuration plus at most one (jittered) retry period: a standby sees
the last renewal at its next look, and tries again when that record expires rather than at its next
look; a graceful stop, within a retry period.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from phalanx.kube.errors import api_errors

log = logging.getLogger(__name__)

DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
JITTER_FACTOR = 1.2  # client-go's: the acquire loop waits retryPeriod * (1 + up to 1.2)
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD

    def validate(self) -> None:
        """client-go's checks: a leader must give up (renewDeadline) before others may take over
        (leaseDuration), with room for a retry or two."""
        if not (self.namespace and self.name and self.identity):
            raise ValueError("leader election needs a Lease namespace, a Lease name and an identity")
        if min(self.lease_duration, self.renew_deadline, self.retry_period) <= 0:
            raise ValueError("leader election: lease duration, renew deadline and retry period must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                f"leader election: the lease duration ({self.lease_duration:g}s) must be greater "
                f"than the renew deadline ({self.renew_deadline:g}s)"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"leader election: the renew deadline ({self.renew_deadline:g}s) must be greater "
                f"than {JITTER_FACTOR:g} x the retry period ({self.retry_period:g}s)"
            )


def pod_namespace(environ: Mapping[str, str] = os.environ, path: str = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The namespace this pod runs in: POD_NAMESPACE (downward API), else the service account's namespace
    file, else "default"."""
    if environ.get("POD_NAMESPACE"):
        return environ["POD_NAMESPACE"]
    try:
        with open(path, encoding="utf-8") as f:
            found = f.read().strip()
    except OSError:
        found = ""
    return found or "default"


def pod_name(environ: Mapping[str, str] = os.environ) -> str:
    return environ.get("POD_NAME") or socket.gethostname()


def new_identity(pod: str) -> str:
    """A holder identity: the pod's name and a random suffix of this process, as kube-scheduler's
    hostname_uuid. Pod names never contain "_", so the pod part is everything before the last one."""
    return f"{pod}_{uuid.uuid4().hex[:12]}"


def _pod_of(identity: str) -> str:
    return identity.rsplit("_", 1)[0] if "_" in identity else ""


def _micro_time(t: float) -> str:
    """A metav1.MicroTime."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for the Lease and keeps it (see the module docstring). `run` blocks: it returns when
    leadership is lost (after calling `on_stopped_leading(reason)`) or `stop` is set. `on_started_leading
    (term)` runs on its own thread once the Lease is won, while renewals go on."""

    def __init__(
        self,
        api: Any,
        config: ElectionConfig,
        *,
        on_started_leading: Callable[[int], None],
        on_stopped_leading: Callable[[str], None],
        on_tick: Callable[[], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`api`: the Lease calls (phalanx.kube.api.KubeApi; a CoordinationV1Api has the same). `on_tick`: called
        at every iteration (a liveness beat)."""
        config.validate()
        self.api = api
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_tick = on_tick
        self._mono = monotonic
        self._wall = wall
        self._lock = threading.Lock()  # lease writes: the renew loop and raise_transitions
        self._lease: dict[str, Any] | None = None  # the Lease as last written by us (resourceVersion)
        self._observed: dict[str, Any] | None = None  # the spec last seen, and when (our monotonic clock)
        self._observed_at = 0.0
        self._renewed_at = 0.0  # monotonic time of the last successful acquire or renewal
        self.leading = threading.Event()
        self.term: int | None = None  # leaseTransitions after our acquisition
        self.lost_reason = ""

    # -- the loop --------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        if not self._acquire(stop):
            return
        log.info(
            "leader election: %s leads (Lease %s/%s, term %s)",
            self.config.identity,
            self.config.namespace,
            self.config.name,
            self.term,
        )
        assert self.term is not None
        threading.Thread(target=self.on_started_leading, args=(self.term,), name="leader-takeover", daemon=True).start()
        reason = self._renew(stop)
        if reason:
            self.lost_reason = reason
            self.leading.clear()
            log.error("leader election: %s lost leadership: %s", self.config.identity, reason)
            self.on_stopped_leading(reason)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="leader-election", daemon=True)
        thread.start()
        return thread

    def _tick(self) -> None:
        if self.on_tick is not None:
            self.on_tick()

    def _acquire(self, stop: threading.Event) -> bool:
        logged = ""
        while not stop.is_set():
            self._tick()
            holder = self._attempt(self._mono() + self.config.renew_deadline)
            if holder is True:
                return True
            if isinstance(holder, str) and holder != logged:
                log.info(
                    "leader election: %s is standby; the Lease %s/%s is held by %s",
                    self.config.identity,
                    self.config.namespace,
                    self.config.name,
                    holder,
                )
                logged = holder
            stop.wait(self._until_next_attempt())
        return False

    def _until_next_attempt(self) -> float:
        """A retry period with client-go's jitter, or less when the holder's record, unchanged, expires
        sooner: a standby then tries at that moment, instead of up to 2.2 retry periods after it. Expiry is
        judged as always (the record unchanged for its duration on this process's clock), only sooner
        noticed."""
        wait = self.config.retry_period * (1 + random.random() * JITTER_FACTOR)
        spec = self._observed or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.config.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
            expires_in = self._observed_at + duration - self._mono()
            if 0 < expires_in < wait:  # once past (an attempt failed), the retry period again: no busy loop
                wait = expires_in + 0.01
        return wait

    def _renew(self, stop: threading.Event) -> str:
        """Renews every retry period until `stop` ("" then) or leadership is lost (its reason)."""
        while not stop.wait(self.config.retry_period):
            self._tick()
            deadline = self._renewed_at + self.config.renew_deadline
            result = self._attempt(deadline)
            if stop.is_set():
                return ""
            if result is True:
                continue
            if isinstance(result, str) and result and result != self.config.identity:
                return f"the Lease is held by {result} now"
            if self._mono() >= deadline:
                return f"the Lease was not renewed for {self.config.renew_deadline:g}s (renew deadline)"
        return ""

    # -- one attempt (client-go's tryAcquireOrRenew) -------------------------------------------------
    def _attempt(self, deadline: float) -> bool | str | None:
        """True: we hold the Lease (acquired or renewed); a str: its holder, who is not us; None: failed
        (API error, conflict)."""
        timeout = max(0.2, min(deadline - self._mono(), self.config.renew_deadline / 2))
        try:
            with self._lock:
                if self.leading.is_set() and self._lease is not None and self._fast_renew(timeout):
                    return True
                return self._try_acquire_or_renew(timeout)
        except Exception as exc:
            log.warning(
                "leader election: Lease %s/%s: %s",
                self.config.namespace,
                self.config.name,
                str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
            )
            return None

    def _fast_renew(self, timeout: float) -> bool:
        """A renewal written over the Lease as we last wrote it (no read); a conflict falls back to a read."""
        assert self._lease is not None
        lease = json.loads(json.dumps(self._lease))
        lease["spec"]["renewTime"] = _micro_time(self._wall())
        return self._replace(lease, timeout, conflict_ok=True)

    def _try_acquire_or_renew(self, timeout: float) -> bool | str | None:
        cfg = self.config
        now_mono, now = self._mono(), _micro_time(self._wall())
        record = {
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": max(1, round(cfg.lease_duration)),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        try:
            lease = self._read(timeout)
        except api_errors() as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": record,
            }
            try:
                created = self.api.create_namespaced_lease(
                    cfg.namespace, body, _preload_content=False, _request_timeout=timeout
                )
            except api_errors() as exc2:
                if exc2.status == 409:  # another replica created it first
                    return None
                raise
            self._won(json.loads(created.data), now_mono)
            return True
        spec = lease.get("spec") or {}
        if spec != self._observed:
            self._observed, self._observed_at = spec, now_mono
        holder = spec.get("holderIdentity") or ""
        if holder and holder != cfg.identity:
            if self.leading.is_set():
                return holder  # taken from us: lost
            duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
            expired = self._observed_at + duration <= now_mono
            predecessor = _pod_of(holder) != "" and _pod_of(holder) == _pod_of(cfg.identity)
            if not expired and not predecessor:
                return holder
            if predecessor and not expired:
                log.info(
                    "leader election: the Lease is held by %s, an earlier incarnation of this pod: taking it over",
                    holder,
                )
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == cfg.identity:
            record["acquireTime"] = spec.get("acquireTime") or now
            record["leaseTransitions"] = transitions
        else:
            record["leaseTransitions"] = transitions + 1
        lease["spec"] = record
        if not self._replace(lease, timeout, conflict_ok=False):
            return None
        return True

    def _read(self, timeout: float) -> dict[str, Any]:
        resp = self.api.read_namespaced_lease(
            self.config.name, self.config.namespace, _preload_content=False, _request_timeout=timeout
        )
        return json.loads(resp.data)

    def _replace(self, lease: dict[str, Any], timeout: float, conflict_ok: bool) -> bool:
        """Writes `lease` (its metadata.resourceVersion is the precondition); False on 409 Conflict."""
        started = self._mono()
        try:
            resp = self.api.replace_namespaced_lease(
                self.config.name, self.config.namespace, lease, _preload_content=False, _request_timeout=timeout
            )
        except api_errors() as exc:
            if exc.status == 409:
                return False
            raise
        self._won(json.loads(resp.data), started)
        return True

    def _won(self, lease: dict[str, Any], at: float) -> None:
        """We hold `lease` as of monotonic time `at` (when the write was sent: the conservative end)."""
        self._lease = lease
        spec = lease.get("spec") or {}
        self._observed, self._observed_at = spec, at
        self._renewed_at = at
        self.term = int(spec.get("leaseTransitions") or 0)
        self.leading.set()

    # -- for the leader ----------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """Leading, and renewed within the renew deadline."""
        return self.leading.is_set() and self._mono() - self._renewed_at < self.config.renew_deadline

    def raise_transitions(self, at_least: int) -> int:
        """Sets the held Lease's leaseTransitions to `at_least` if lower (a Lease recreated after a deletion
        restarts its count below the fencing term Redis already holds); returns the new term. Raises if
        the Lease is not ours any more."""
        with self._lock:
            if not self.leading.is_set() or self._lease is None:
                raise RuntimeError("not the leader")
            lease = json.loads(json.dumps(self._lease))
            if int(lease["spec"].get("leaseTransitions") or 0) >= at_least:
                return int(lease["spec"]["leaseTransitions"])
            lease["spec"]["leaseTransitions"] = at_least
            lease["spec"]["renewTime"] = _micro_time(self._wall())
            if not self._replace(lease, self.config.renew_deadline / 2, conflict_ok=False):
                raise RuntimeError("the Lease changed under the leader (conflict)")
            assert self.term is not None
            return self.term

    def release(self) -> bool:
        """A graceful stop: the Lease is left without a holder (and a 1 s duration) so a standby takes over at
        once. Call after stopping the renew loop and everything that writes. False if not held (any more)."""
        with self._lock:
            if not self.leading.is_set() or self._lease is None:
                return False
            self.leading.clear()
            lease = json.loads(json.dumps(self._lease))
            now = _micro_time(self._wall())
            lease["spec"] = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": int(lease["spec"].get("leaseTransitions") or 0),
            }
            try:
                self.api.replace_namespaced_lease(
                    self.config.name,
                    self.config.namespace,
                    lease,
                    _preload_content=False,
                    _request_timeout=self.config.retry_period,
                )
            except Exception as exc:  # a conflict (someone else holds it already) or the API server is away
                log.warning("leader election: releasing the Lease failed: %s", str(exc).splitlines()[0][:200])
                return False
            log.info(
                "leader election: %s released the Lease %s/%s",
                self.config.identity,
                self.config.namespace,
                self.config.name,
            )
            return True


def claim_fencing_term(elector: LeaderElector, store: Any) -> int:
    """The new leader's fencing term, raised in Redis (`store`: a StateStore): the Lease's leaseTransitions,
    unless Redis already holds that term or a newer one (the Lease was recreated and counts from 0 again,
    or this claim is repeated), in which case leaseTransitions is first raised above it. A leader never
    shares its term with an earlier one."""
    assert elector.term is not None
    term = elector.term
    for _ in range(5):
        raised, current = store.claim_term(term)
        if raised:
            return term
        log.warning(
            "leader election: Redis holds fencing term %d, not below the Lease's %d; raising the Lease's count",
            current,
            term,
        )
        term = elector.raise_transitions(current + 1)
    raise RuntimeError(f"could not claim a fencing term above {current}")
