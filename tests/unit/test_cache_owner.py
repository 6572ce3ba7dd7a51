"""The scheduler cache is the only writer of its data (phalanx.scheduling.cache): no module of the product
writes the snapshot, the gang manager's state, or the assumed and bound pods through another path."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "libs" / "phalanx", ROOT / "services"]
# The owners themselves: the cache, and the types it is made of (they write their own fields).
OWNERS = {
    "scheduling/cache.py",
    "gang/manager.py",
    "gang/ops.py",
    "gang/record.py",
    "gang/statement.py",
    "framework/snapshot.py",
}

WRITES = re.compile(
    r"\bsnapshot\.(reserve|set_nodes|upsert_nodes|remove_nodes|load_used|clear_pods|track_pod)\("
    r"|\bgangs\.(commit|apply|upsert|remove|forget|load)\("
    r"|\bgangs\.\w+\s*=[^=]"
    # the scheduler's and the cache's pod sets, by the names code reaches them through
    r"|\b(cache|scheduler|sched|s)\.(assumed|bound)\.(pop|add|discard|update|clear|remove|setdefault)\("
    r"|\b(cache|scheduler|sched|s)\.(assumed|bound)\[[^\]]+\]\s*=[^=]"
)


def writes_outside_the_cache(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if WRITES.search(line)]


def test_the_scanner_sees_each_kind_of_write() -> None:
    planted = [
        "self.snapshot.reserve(i, reqs, pod=p)",
        "s.gangs.commit(stmt)",
        "self.gangs.records = {}",
        "self.cache.assumed.pop(key, None)",
        "sched.bound.add(key)",
        "sched.assumed[key] = record",
        "gangs.unsettled = set()",
    ]
    assert writes_outside_the_cache("\n".join(planted)) == planted
    assert writes_outside_the_cache("x = self.cache.snapshot.free_total()\nif key in s.bound:\n    pass") == []


def test_only_the_cache_writes_its_data() -> None:
    found = []
    for base in SOURCES:
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).as_posix()
            if rel in OWNERS or "/v1/" in f"/{rel}":
                continue
            found += [f"{path.relative_to(ROOT)}: {line}" for line in writes_outside_the_cache(path.read_text())]
    assert found == [], "write the scheduler's memory through SchedulerCache's methods:\n" + "\n".join(found)
