"""A reason message reduced to its cause, so one cause counts once however many gangs and pods it hit.

The scheduler's messages name the gang, its pods and its GangGroup partners, and carry counts ("gang
default/job-7 timed out after waiting 300s with 2/8 pods placed (last failure: job-7-3: 0/8 nodes are
available: 8 Insufficient nvidia.com/gpu)"). The names are taken out from what the report knows (each pod's
gang, the gang's pods, its group), not guessed from the text; what is left of a number becomes N:

    gang <gang> timed out after waiting Ns with N/N pods placed (last failure: <pod>: N/N nodes are
    available: N Insufficient nvidia.com/gpu)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

POD, GANG, MEMBER = "<pod>", "<gang>", "<member gang>"

# A name is matched whole: not inside a longer name (job-7 in job-70, or in default/job-7's pod job-7-3).
_BEFORE = r"(?<![\w./-])"
_AFTER = r"(?![\w-]|[./]\w)"
# Counts, seconds and shares; digits glued to a letter before them belong to a name (a resource, a node).
_NUMBER = re.compile(r"(?<![A-Za-z_.])\d+(?:\.\d+)?")


def names_of_pod(namespace: str, name: str) -> dict[str, str]:
    return {f"{namespace}/{name}": POD, name: POD}


def names_of_gang(
    gang: str, pods: Iterable[tuple[str, str]], members: Mapping[str, Iterable[tuple[str, str]]]
) -> dict[str, str]:
    """The names a message about `gang` may carry: its key, its pods' (namespace, name), and each GangGroup
    member's key and pods (a message quotes the member's last failure)."""
    out: dict[str, str] = {}
    for member, member_pods in members.items():
        out[member] = MEMBER
        for ns, name in member_pods:
            out.update(names_of_pod(ns, name))
    for ns, name in pods:
        out.update(names_of_pod(ns, name))
    out[gang] = GANG
    return out


def cause_of(message: str, names: Mapping[str, str]) -> str:
    """`message` with each of `names` replaced by its placeholder and every number by N."""
    text = message
    if names:
        # Longest first, so a pod named after its gang (job-7-3) is not read as the gang (job-7) and a tail.
        alternation = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True) if n)
        text = re.sub(f"{_BEFORE}(?:{alternation}){_AFTER}", lambda m: names[m.group(0)], text)
    return _NUMBER.sub("N", text)


@dataclass
class Cause:
    """One cause, counted: how many gangs and pods it held, and one gang (or pod) to read in full."""

    cause: str
    gangs: int = 0
    pods: int = 0
    example: str = ""
    example_reason: str = ""
    _gangs: set[str] = field(default_factory=set, repr=False)
    _example_is_gang: bool = field(default=False, repr=False)

    def to_json(self) -> dict[str, object]:
        return {
            "cause": self.cause,
            "gangs": self.gangs,
            "pods": self.pods,
            "example": self.example,
            "exampleReason": self.example_reason,
        }


def tally(items: Iterable[tuple[str, str, str, str, int]]) -> list[Cause]:
    """(cause, gang or "", example name, its full reason, pods) -> causes, the most pods first, then the most
    gangs, then by text (a stable order for reports that are compared). A gang's example wins over a pod's."""
    by_cause: dict[str, Cause] = {}
    for cause, gang, example, reason, pods in items:
        c = by_cause.setdefault(cause, Cause(cause))
        c.pods += pods
        if gang and gang not in c._gangs:
            c._gangs.add(gang)
            c.gangs += 1
        if not c.example or (gang and not c._example_is_gang):
            c.example, c.example_reason, c._example_is_gang = example, reason, bool(gang)
    return sorted(by_cause.values(), key=lambda c: (-c.pods, -c.gangs, c.cause))


def unbound_causes(report: dict[str, Any]) -> list[Cause]:
    """The unbound pods counted by cause. A report written before causes were recorded falls back to each
    reason with the names it knows taken out: the pod's, and its gang's and that gang's pods' when it says."""
    pods = [p for p in report.get("pods") or [] if isinstance(p, dict)]
    members: dict[str, list[tuple[str, str]]] = {}
    for p in pods:
        if p.get("gang"):
            members.setdefault(str(p["gang"]), []).append((str(p.get("namespace", "")), str(p.get("name", ""))))
    items = []
    for p in pods:
        if p.get("boundAt") is not None:
            continue
        ns, name = str(p.get("namespace", "")), str(p.get("name", ""))
        reason = str(p.get("reason") or "no reason recorded")
        gang = str(p.get("gang") or "")
        cause = p.get("cause") or cause_of(
            reason, names_of_gang(gang, members[gang], {}) if gang else names_of_pod(ns, name)
        )
        items.append((str(cause), gang, gang or f"{ns}/{name}", reason, 1))
    return tally(items)


def gang_causes(report: dict[str, Any], started: bool) -> list[Cause]:
    """The gangs that waited and then started (`started`), or never started, counted by the cause of their
    wait (pods: theirs)."""
    sizes = {
        f"{g.get('namespace')}/{g.get('name')}": g.get("pods")
        for g in report.get("podGroups") or []
        if isinstance(g, dict)
    }
    began = {w.get("gang") for w in report.get("gangWaits") or [] if isinstance(w, dict)}
    items = []
    for g in report.get("gangReasons") or []:
        if not isinstance(g, dict) or (g.get("gang") in began) != started:
            continue
        gang, reason = str(g.get("gang", "")), str(g.get("reason", ""))
        pods = sizes.get(gang)
        items.append((str(g.get("cause") or reason), gang, gang, reason, pods if isinstance(pods, int) else 0))
    return tally(items)
