"""A scheduling profile: which filters run, which scores count with what weight (a YAML file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

DEFAULT_FILTERS = ("NodeUnschedulable", "NodeSelector", "NodeAffinity", "TaintToleration", "NodeResourcesFit",
                   "GPUShare")


@dataclass
class Profile:
    filters: tuple[str, ...] = DEFAULT_FILTERS
    scores: dict[str, float] = field(default_factory=lambda: {"LeastAllocated": 1.0})
    # Share of feasible nodes to find before scoring (kube-scheduler's percentageOfNodesToScore); 100 = all.
    percentage_of_nodes_to_score: int = 100


class ProfileError(ValueError):
    pass


def load_profile(path: str | Path | None) -> Profile:
    """Reads a profile file; every error names the file and the field."""
    if path is None:
        return Profile()
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"profile {path}: {exc}") from None
    if data is None:
        return Profile()
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: expected a mapping at the top level")
    unknown = set(data) - {"filters", "scores", "percentageOfNodesToScore"}
    if unknown:
        raise ProfileError(f"profile {path}: unknown field(s) {', '.join(sorted(unknown))}")
    profile = Profile()
    if "filters" in data:
        filters = data["filters"]
        if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
            raise ProfileError(f"profile {path}: filters: expected a list of plugin names")
        profile.filters = tuple(filters)
    if "scores" in data:
        scores = data["scores"]
        if not isinstance(scores, dict):
            raise ProfileError(f"profile {path}: scores: expected a mapping of plugin name to weight")
        for name, weight in scores.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
                raise ProfileError(f"profile {path}: scores.{name}: weight must be a non-negative number")
        profile.scores = {str(k): float(v) for k, v in scores.items()}
    if "percentageOfNodesToScore" in data:
        pct = data["percentageOfNodesToScore"]
        if isinstance(pct, bool) or not isinstance(pct, int) or not 1 <= pct <= 100:
            raise ProfileError(f"profile {path}: percentageOfNodesToScore: expected an integer from 1 to 100")
        profile.percentage_of_nodes_to_score = pct
    return profile
