"""The memo of a pod's shared spec parts (intake/spec_parts.py): a job's pods are parsed once for what they
share, and nothing about errors or results changes."""

from datetime import datetime, timezone

import pytest
from builders import make_pod

from phalanx.backends.kube_guard import PodFacts
from phalanx.intake import spec_parts
from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod


@pytest.fixture(autouse=True)
def counted(monkeypatch):
    """How often the memo's parses actually ran."""
    spec_parts.clear()
    calls = {"requests": 0, "placement": 0, "affinity": 0}

    def counting(name, fn):
        def wrapper(*args):
            calls[name] += 1
            return fn(*args)

        return wrapper

    monkeypatch.setattr(spec_parts, "pod_requests", counting("requests", spec_parts.pod_requests))
    monkeypatch.setattr(spec_parts, "parse_placement", counting("placement", spec_parts.parse_placement))
    monkeypatch.setattr(spec_parts, "parse_pod_affinity", counting("affinity", spec_parts.parse_pod_affinity))
    yield calls
    spec_parts.clear()


def worker(i: int, *, gpus: int = 2):
    """One pod of a job: the same template, its own name, env and hostname (as job controllers write them)."""
    raw = (
        make_pod(f"job-worker-{i}")
        .cpu("500m")
        .gpu(gpus)
        .node_selector("pool", "a100")
        .toleration("nvidia.com/gpu", "Exists", effect="NoSchedule")
        .build()
    )
    raw["spec"]["hostname"] = f"job-worker-{i}"
    raw["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": str(i)}]
    return raw


def test_a_jobs_pods_are_parsed_once_for_what_they_share(counted):
    pods = [parse_pod(worker(i)) for i in range(50)]
    assert counted == {"requests": 1, "placement": 1, "affinity": 1}
    assert {p.name for p in pods} == {f"job-worker-{i}" for i in range(50)}
    assert all(p.placement is pods[0].placement for p in pods)  # one object: node masks cached by it are shared
    assert pods[7].requests == {"cpu": 500, "nvidia.com/gpu": 2000, "pods": 1000}


def test_different_parts_are_parsed_apart(counted):
    one, other = parse_pod(worker(0, gpus=2)), parse_pod(worker(1, gpus=4))
    assert counted["requests"] == 2
    assert (one.requests["nvidia.com/gpu"], other.requests["nvidia.com/gpu"]) == (2000, 4000)


def test_each_pod_gets_requests_of_its_own():
    first, second = parse_pod(worker(0)), parse_pod(worker(1))
    first.requests["cpu"] = 1
    assert second.requests["cpu"] == 500
    assert parse_pod(worker(2)).requests["cpu"] == 500


def test_a_bad_part_names_each_pod_that_has_it(counted):
    parse_pod(worker(0))
    for i in (1, 2):
        raw = worker(i)
        raw["spec"]["tolerations"][0]["operator"] = "exists"
        with pytest.raises(IntakeError) as err:
            parse_pod(raw)
        assert f"job-worker-{i}" in str(err.value)
        assert "spec.tolerations[0].operator" in str(err.value)
    assert counted["placement"] == 3  # a failed parse is not kept: each bad pod is parsed and named


def test_a_value_json_cannot_spell_exactly_is_not_memoised(counted):
    # YAML reads an unquoted timestamp as a datetime: orjson would write it as the text of a string, and the
    # two must not share a result (as_text spells the datetime its own way).
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    direct = spec_parts.parse_placement
    for i in range(2):
        raw = worker(i)
        raw["spec"]["nodeSelector"]["since"] = when
        assert parse_pod(raw).placement == direct(raw["spec"], None)
    assert counted["placement"] == 4  # each pod parsed twice: by parse_pod (no memo), and directly here
    raw = worker(2)
    raw["spec"]["nodeSelector"]["since"] = "2026-01-01T00:00:00+00:00"
    assert dict(parse_pod(raw).placement.node_selector)["since"] == "2026-01-01T00:00:00+00:00"


def test_a_container_that_is_not_a_mapping_is_reported_as_before():
    raw = worker(0)
    raw["spec"]["containers"].append("sidecar")
    with pytest.raises(IntakeError, match=r"spec\.containers\[1\]"):
        parse_pod(raw)


def test_the_memo_is_bounded(monkeypatch, counted):
    monkeypatch.setattr(spec_parts, "MAX_ENTRIES", 3)
    for gpus in range(1, 6):
        parse_pod(worker(0, gpus=gpus))
    assert len(spec_parts._parts) <= 3
    parse_pod(worker(1, gpus=5))
    assert counted["requests"] == 5  # the latest template is still there


def test_the_binders_check_reads_requests_once_per_template(counted):
    facts = [PodFacts.of(worker(i)) for i in range(20)]
    assert counted["requests"] == 1
    assert all(f.requests == {"cpu": 500, "nvidia.com/gpu": 2000, "pods": 1000} for f in facts)
    bad = worker(20)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    assert "spec.containers[0].resources.requests" in str(PodFacts.of(bad).requests)
