"""A scheduling profile: which filters run, which scores count with what weight (a YAML file)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.model.policies import DEFAULT_POLICY, check_basic_policy

if TYPE_CHECKING:
    import yaml

DEFAULT_FILTERS = (
    "NodeUnschedulable",
    "NodeSelector",
    "NodeAffinity",
    "TaintToleration",
    # Before the fit: a node kept for a starving gang says so, not that it lacks room (passes everything
    # unless the scheduler's starvation bound gave a gang a reservation).
    "StarvationReservation",
    "NodeResourcesFit",
    "GPUShare",
    # Last: they look at the other pods, and pass at once for a pod that declares no affinity or spread.
    "InterPodAffinity",
    "PodTopologySpread",
)
# Preferred affinity and soft spread weigh 30: enough to win over small packing differences, not enough to
# strand GPUs for a preference (kube-scheduler gives them 2 next to its own scores of similar scale).
DEFAULT_SCORES = {"LeastAllocated": 1.0, "GPUFragmentation": 100.0, "InterPodAffinity": 30.0, "PodTopologySpread": 30.0}
# Node preparation (see phalanx.framework.plugin.NodePreparer) is not chosen by a profile file: the prepared
# nodes are what Redis holds and every process (scheduler, binder, explain) counts capacity against.
DEFAULT_NODE_PREPARERS = ("GPUShare",)


@dataclass
class Profile:
    filters: tuple[str, ...] = DEFAULT_FILTERS
    # GPUFragmentation decides wherever there are GPU devices (it scores 0 everywhere without them), and
    # LeastAllocated spreads among its equals and on clusters without GPUs, as kube-scheduler does.
    scores: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SCORES))
    # Share of feasible nodes to find before scoring (kube-scheduler's percentageOfNodesToScore); 100 = all.
    percentage_of_nodes_to_score: int = 100
    node_preparers: tuple[str, ...] = DEFAULT_NODE_PREPARERS  # filter plugins that also prepare nodes
    # The placement policy of pods whose job names none (phalanx.dev/basic-policy); "Default": `scores`.
    basic_policy: str = DEFAULT_POLICY


class ProfileError(ValueError):
    """A profile that cannot be used; `field` is the offending field's path ("" for the whole file), and
    `detail` one line saying what is wrong with it."""

    def __init__(self, path: str | Path, field: str, detail: str) -> None:
        self.path = str(path)
        self.field = field
        self.detail = detail
        super().__init__(f"profile {path}: {self.where()}")

    def where(self) -> str:
        """'field: detail' (or the detail alone), the part after the file's name."""
        return f"{self.field}: {self.detail}" if self.field else self.detail


def load_profile(path: str | Path | None) -> Profile:
    """Reads a profile file; every error names the file and the field, in one line."""
    if path is None:
        return Profile()
    import yaml  # only when a profile file is given: 20-40 ms of every scheduler's start otherwise

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ProfileError(path, "", f"cannot read it: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(path, "", _yaml_problem(exc)) from None
    if data is None:
        return Profile()
    if not isinstance(data, dict):
        raise ProfileError(path, "", f"expected a mapping at the top level, got {_kind(data)}")
    unknown = set(data) - {"filters", "scores", "percentageOfNodesToScore", "basicPolicy"}
    if unknown:
        raise ProfileError(
            path,
            "",
            f"unknown field(s) {', '.join(sorted(map(str, unknown)))} (known: filters, "
            "scores, percentageOfNodesToScore, basicPolicy)",
        )
    profile = Profile()
    if "filters" in data:
        filters = data["filters"]
        if not isinstance(filters, list):
            raise ProfileError(path, "filters", f"expected a list of plugin names, got {_kind(filters)}")
        for i, name in enumerate(filters):
            if not isinstance(name, str):
                raise ProfileError(path, "filters", f"expected plugin names, got {name!r} (item {i + 1})")
        profile.filters = tuple(filters)
    if "scores" in data:
        scores = data["scores"]
        if not isinstance(scores, dict):
            raise ProfileError(path, "scores", f"expected a mapping of plugin name to weight, got {_kind(scores)}")
        for name, weight in scores.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise ProfileError(path, f"scores.{name}", f"weight must be a number >= 0, got {weight!r}")
            if weight < 0:
                raise ProfileError(path, f"scores.{name}", f"weight must be >= 0, got {weight:g}")
        profile.scores = {str(k): float(v) for k, v in scores.items()}
    if "percentageOfNodesToScore" in data:
        pct = data["percentageOfNodesToScore"]
        if isinstance(pct, bool) or not isinstance(pct, int) or not 1 <= pct <= 100:
            raise ProfileError(path, "percentageOfNodesToScore", f"expected an integer from 1 to 100, got {pct!r}")
        profile.percentage_of_nodes_to_score = pct
    if "basicPolicy" in data:
        policy = data["basicPolicy"]
        if not isinstance(policy, str):
            raise ProfileError(path, "basicPolicy", f"expected a policy name, got {_kind(policy)}")
        try:
            profile.basic_policy = check_basic_policy(policy)
        except ValueError as exc:
            raise ProfileError(path, "basicPolicy", str(exc)) from None
    return profile


def check_plugin_names(profile: Profile, path: str | Path, filters: Iterable[str], scores: Iterable[str]) -> None:
    """Every plugin the profile names is one of the registered `filters` and `scores` (their names)."""
    known_filters, known_scores = set(filters), set(scores)
    for i, name in enumerate(profile.filters):
        if name not in known_filters:
            raise ProfileError(
                path,
                "filters",
                f"unknown filter plugin {name!r} (item {i + 1}; known: {', '.join(sorted(known_filters))})",
            )
    for name in profile.scores:
        if name not in known_scores:
            raise ProfileError(
                path, f"scores.{name}", f"unknown score plugin (known: {', '.join(sorted(known_scores))})"
            )


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return repr(value)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The parser's complaint and position in one line (its own message spans several)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return f"invalid YAML: {problem}"
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
