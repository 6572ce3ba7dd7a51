"""The deploy files name exactly the registered plugins (phalanx.plugins.registry, the one list).

The Helm chart's values.schema.json enums, values.yaml, the plain manifests' ConfigMap and the compose profile
are written by hand; this ties each to the registry, so a plugin added, renamed or dropped in Python fails here
until the chart, manifests and compose say the same. Reads files only: no helm, no process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.framework.profile import Profile
from phalanx.model.policies import BASIC_POLICIES
from phalanx.plugins.registry import plugin_names

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "phalanx"
MANIFESTS = REPO / "deploy" / "manifests"
FILTERS, SCORES = plugin_names()


def profiles() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every scheduling profile the deploy files ship: the chart's default value, each manifest ConfigMap
    holding a profile.yaml, and each profile file or inline config of the compose files."""
    yield "values.yaml profile", yaml.safe_load((CHART / "values.yaml").read_text())["profile"]
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" and "profile.yaml" in doc.get("data", {}):
                yield path.name, yaml.safe_load(doc["data"]["profile.yaml"])
    for path in sorted(REPO.glob("docker-compose*.yml")):
        for name, config in (yaml.safe_load(path.read_text()).get("configs") or {}).items():
            text = (path.parent / config["file"]).read_text() if "file" in config else config.get("content", "")
            profile = yaml.safe_load(text)
            if isinstance(profile, dict) and {"filters", "scores"} & set(profile):
                yield f"{path.name} config {name}", profile


def listed(path: Path, lead: str) -> list[str]:
    """The names a comment lists after `lead` (up to its sentence's full stop), across wrapped lines."""
    comments = " ".join(
        line.strip().lstrip("#").strip() for line in path.read_text().splitlines() if line.strip().startswith("#")
    )
    start = comments.find(lead)
    assert start >= 0, f"{path.name}: no comment {lead!r}"
    sentence = re.split(r"\.(?:\s|$)", comments[start + len(lead) :], maxsplit=1)[0]
    return [name.strip() for name in re.split(r",|\bor\b", sentence) if name.strip()]


def test_the_deploy_files_ship_profiles() -> None:
    """The checks below cannot pass by finding nothing: chart, manifests and compose each ship one."""
    where = [w for w, _ in profiles()]
    assert len(where) == 3 and any("docker-compose" in w for w in where), where


@pytest.mark.parametrize("where, profile", list(profiles()), ids=[w for w, _ in profiles()])
def test_each_shipped_profile_is_the_default_and_names_registered_plugins(where: str, profile: dict[str, Any]) -> None:
    assert set(profile["filters"]) <= set(FILTERS), f"{where}: unknown filters {set(profile['filters']) - set(FILTERS)}"
    assert set(profile["scores"]) <= set(SCORES), f"{where}: unknown scores {set(profile['scores']) - set(SCORES)}"
    # The same as the scheduler's built-in default (which Framework checks against the registries).
    default = Profile()
    assert profile == {
        "filters": list(default.filters),
        "scores": default.scores,
        "percentageOfNodesToScore": default.percentage_of_nodes_to_score,
        "basicPolicy": default.basic_policy,
    }, where


def test_the_chart_schema_enums_are_the_registry() -> None:
    profile = json.loads((CHART / "values.schema.json").read_text())["properties"]["profile"]["properties"]
    filters = profile["filters"]["items"]["enum"]
    scores = profile["scores"]["propertyNames"]["enum"]
    assert sorted(filters) == FILTERS and len(set(filters)) == len(filters)
    assert sorted(scores) == SCORES and len(set(scores)) == len(scores)
    assert tuple(profile["basicPolicy"]["enum"]) == BASIC_POLICIES


@pytest.mark.parametrize(
    "path, lead, names",
    [
        (CHART / "values.yaml", "Filter plugins, in order:", FILTERS),
        (CHART / "values.yaml", "Score plugin -> non-negative weight:", SCORES),
        (MANIFESTS / "40-scheduler-profile.yaml", "Known filters:", FILTERS),
        (MANIFESTS / "40-scheduler-profile.yaml", "Known scores:", SCORES),
    ],
    ids=["values-filters", "values-scores", "manifest-filters", "manifest-scores"],
)
def test_the_comments_that_list_the_plugins_list_the_registry(path: Path, lead: str, names: list[str]) -> None:
    assert sorted(listed(path, lead)) == names


@pytest.mark.parametrize("path", [CHART / "values.yaml", MANIFESTS / "40-scheduler-profile.yaml"], ids=lambda p: p.name)
def test_the_comments_name_only_known_basic_policies(path: Path) -> None:
    lead = "(phalanx.dev/basic-policy):"
    policies = [name.split(" (")[0] for name in listed(path, lead)]  # "Default (the scores above)"
    assert policies and set(policies) <= set(BASIC_POLICIES), policies
