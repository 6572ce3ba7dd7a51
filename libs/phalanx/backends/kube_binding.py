"""Bindings through the pods/binding subresource, as kube-scheduler makes them.

The pod's UID is a precondition (a pod deleted and recreated under the same name is not bound by mistake).
Pods of a batch are bound concurrently. What an answer means:
- 201: bound; a `Scheduled` Event follows, as kube-scheduler writes it.
- 404, or 409 because the UID differs: the pod is gone. Not an error for the rest of its gang.
- 409 otherwise: the pod is read back; already bound to the same node (our earlier attempt did succeed, its
  answer was lost) counts as success, bound elsewhere is a failure.
- 429, 5xx, timeouts, connection errors: retried with capped exponential backoff, a bounded number of times.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from functools import partial
from typing import Any

from phalanx import faults
from phalanx.backends.api_calls import api_message, release, transient
from phalanx.backends.base import BindFailure
from phalanx.backends.kube_writer import KubeWriter
from phalanx.kube.api import raise_for_status
from phalanx.kube.errors import is_api_error
from phalanx.model.binding import Assignment
from phalanx.model.status import EventReason

BETWEEN_PODS = "binder.between_pods"


class _Retry(Exception):
    """A transient answer: try again after the backoff."""


class PodBinding(KubeWriter):
    """A batch's bindings and one pod's retries and the reading of a conflict (KubernetesBackend.bind runs
    them)."""

    def _bind_batch(self, assignments: list[Assignment]) -> list[BindFailure | None]:
        """First attempts of the whole batch through the pipeline (one TLS write for the gang), then each
        pod whose answer says "later" on the per-pod path with its retries. With a kill configured between
        pods (fault tests), the bindings are written one at a time, so the kill does fall between two."""
        one_by_one = faults.armed(BETWEEN_PODS)
        sent: list[tuple[Assignment, Future[Any] | BindFailure, str]] = []
        for a in assignments:
            body = self._binding(a)
            if isinstance(body, BindFailure):
                sent.append((a, body, ""))
                continue
            namespace, name = a.pod_key.split("/", 1)
            future = self.bind_api.send_pod_binding(name, namespace, body)
            # The Event goes out from the pipeline's reader as the answer is read, not once this thread gets
            # the GIL back and reaches the pod in its loop: under a burst that wait was 45 ms at the median.
            future.add_done_callback(partial(self._scheduled_if_created, a, body["metadata"]["uid"]))
            if one_by_one:
                future.exception()  # wait: answered (or failed) before the next pod is written
            sent.append((a, future, body["metadata"]["uid"]))
        outcomes: list[BindFailure | None] = []
        for a, answer, uid in sent:
            if isinstance(answer, BindFailure):
                outcomes.append(answer)
                continue
            try:
                reply = answer.result()
            except Exception:  # no answer: the per-pod path tries again (a binding made is a 409 read back)
                outcomes.append(self._bind_one(a))
                continue
            try:
                raise_for_status(reply)
            except Exception as refused:
                try:
                    outcomes.append(self._bind_error(a, refused))
                except _Retry:
                    outcomes.append(self._bind_one(a))
                except Exception as unexpected:
                    outcomes.append(BindFailure(f"binding {a.pod_key} to {a.node} failed: {unexpected}"))
                continue
            faults.reached(BETWEEN_PODS)  # its Event is on its way already (_scheduled_if_created)
            outcomes.append(None)
        return outcomes

    def _scheduled_if_created(self, a: Assignment, uid: str, answer: Future[Any]) -> None:
        """A pipelined binding's answer: if it made the binding (2xx), the pod's `Scheduled` Event."""
        if answer.cancelled() or answer.exception() is not None or not 200 <= answer.result().status <= 299:
            return  # not bound by this request: _bind_batch sorts it out, and _bound writes any Event then
        self._scheduled_event(a, uid)

    def _binding(self, a: Assignment) -> dict[str, Any] | BindFailure:
        """The Binding of `a` (its pod's uid as the precondition)."""
        namespace, name = a.pod_key.split("/", 1)
        uid = a.uid
        if not uid:  # every binding names the incarnation checked as ours: take the uid from the view
            found = self._our_uid(a.pod_key)
            if isinstance(found, BindFailure):
                return found
            uid = found
        # Precondition: only this incarnation of the pod (and schedulerName is immutable: only one of ours).
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": a.node},
        }
        return body

    def _bound(self, a: Assignment, uid: str) -> None:
        """A binding made: its `Scheduled` Event (not waited for: the bind, and the bind mutex, go on)."""
        faults.reached(BETWEEN_PODS)
        self._scheduled_event(a, uid)

    def _scheduled_event(self, a: Assignment, uid: str) -> None:
        namespace, name = a.pod_key.split("/", 1)
        target = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid}
        self._event_safe(target, EventReason.SCHEDULED, f"Successfully assigned {a.pod_key} to {a.node}")

    def _bind_one(self, a: Assignment) -> BindFailure | None:
        body = self._binding(a)
        if isinstance(body, BindFailure):
            return body
        namespace, name = a.pod_key.split("/", 1)
        delay, last = self.retry.initial_delay, ""
        for attempt in range(self.retry.attempts):
            if attempt:
                time.sleep(delay)
                delay = min(delay * 2, self.retry.max_delay)
            try:
                # _preload_content=False: the answer (a Status) is read raw.
                release(
                    self.bind_api.create_namespaced_pod_binding(
                        name,
                        namespace,
                        body,
                        _preload_content=False,
                        _request_timeout=self.retry.request_timeout,
                    )
                )
            except Exception as exc:
                try:
                    failure = self._bind_error(a, exc)
                except _Retry as retry:
                    last = str(retry)
                    continue
                except Exception as unexpected:  # a failed pod, never a failed batch
                    return BindFailure(f"binding {a.pod_key} to {a.node} failed: {unexpected}")
                if failure is not None:
                    return failure
            self._bound(a, body["metadata"]["uid"])
            return None
        return BindFailure(
            f"binding {a.pod_key} to {a.node} failed after {self.retry.attempts} attempts: {last}", retryable=True
        )

    def _our_uid(self, pod_key: str) -> str | BindFailure:
        try:
            facts = self.view.pod(pod_key)
        except Exception as exc:
            return BindFailure(f"could not check pod {pod_key}: {exc}", retryable=transient(exc))
        if facts is None:
            return BindFailure(f"pod {pod_key} does not exist", gone=True)
        if not self.view.ours(facts):
            return BindFailure(
                f'pod {pod_key} names scheduler "{facts.scheduler}", not "{self.component}": not Phalanx\'s to bind'
            )
        return facts.uid

    def _bind_error(self, a: Assignment, exc: Exception) -> BindFailure | None:
        """None: the pod is bound where we wanted it after all. Raises _Retry for transient errors."""
        if not is_api_error(exc):
            if transient(exc):
                raise _Retry(f"{type(exc).__name__}: {exc}")
            raise exc
        if exc.status == 404:
            return BindFailure(f"pod {a.pod_key} no longer exists", gone=True)
        if exc.status == 409:
            return self._after_conflict(a, api_message(exc))
        if exc.status == 429 or (exc.status or 0) >= 500:
            raise _Retry(f"{exc.status} {api_message(exc)}")
        return BindFailure(f"binding {a.pod_key} to {a.node} was refused: {exc.status} {api_message(exc)}")

    def _after_conflict(self, a: Assignment, message: str) -> BindFailure | None:
        namespace, name = a.pod_key.split("/", 1)
        try:
            pod = self._read_pod(namespace, name)
        except Exception as exc:
            if transient(exc):
                raise _Retry(f"conflict ({message}); reading the pod failed: {exc}") from None
            raise
        if pod is None or (a.uid and (pod.get("metadata") or {}).get("uid") != a.uid):
            return BindFailure(f"pod {a.pod_key} no longer exists (deleted or recreated)", gone=True)
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if node == a.node:
            return None
        if node:
            return BindFailure(f"pod {a.pod_key} is already bound to {node}")
        raise _Retry(f"conflict: {message}")
