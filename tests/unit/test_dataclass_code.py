"""The cache of the services' generated dataclass code (phalanx.dataclass_code): built by
`python -m phalanx.precompile`, read by every later start, and harmless when missing or foreign. Each check
is a fresh interpreter, as a service's start is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phalanx.dataclass_code import CACHE_ENV

pytestmark = pytest.mark.starts_processes

COUNTS = "from phalanx import dataclass_code as d\nc = d.install()\nprint(json.dumps([c.misses, c.hits]))\n"


def _python(code: str, cache: Path, cwd: Path | None = None) -> list[str]:
    env = {**os.environ, CACHE_ENV: str(cache)}
    proc = subprocess.run(
        [sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()


def _counts(code: str, cache: Path, cwd: Path | None = None) -> tuple[int, int]:
    misses, hits = json.loads(_python(code + "\n" + COUNTS, cache, cwd)[-1])
    return misses, hits


def test_a_built_cache_spares_the_scheduler_every_compilation(tmp_path: Path) -> None:
    cache = tmp_path / "code.bin"
    start = "import phalanx_scheduler.__main__, phalanx.cluster.feed"
    misses, hits = _counts(start, cache)
    assert misses > 300 and hits < misses  # nothing cached: each method compiled (a few share a source)
    assert not cache.exists()  # a service's start writes nothing

    env = {**os.environ, CACHE_ENV: str(cache)}
    built = subprocess.run(
        [sys.executable, "-m", "phalanx.precompile"], capture_output=True, text=True, timeout=120, env=env
    )
    assert built.returncode == 0, built.stderr
    assert "dataclass methods compiled" in built.stdout and cache.exists()

    assert _counts(start, cache) == (0, misses + hits)


def test_classes_made_from_cached_code_behave_as_dataclasses(tmp_path: Path) -> None:
    (tmp_path / "shapes.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass, field, replace, FrozenInstanceError

            @dataclass(frozen=True)
            class Gang:
                name: str
                pods: tuple[str, ...] = ()
                labels: dict = field(default_factory=dict, compare=False, hash=False)

            def check():
                a, b = Gang("g", ("p",)), Gang("g", ("p",), {"x": "y"})
                assert a == b and hash(a) == hash(b) and a != Gang("h")
                assert repr(a) == "Gang(name='g', pods=('p',), labels={})", repr(a)
                assert replace(a, name="h").name == "h" and a.labels is not Gang("g").labels
                try:
                    a.name = "x"
                except FrozenInstanceError:
                    return "ok"
                return "not frozen"
            """
        )
    )
    cache = tmp_path / "code.bin"
    # (phalanx first: its package installs the cache, as it does for its own modules)
    first = "import phalanx, shapes\nprint(shapes.check())\nfrom phalanx import dataclass_code as d\nprint(d.save())"
    assert _python(first, cache, cwd=tmp_path)[-2:] == ["ok", "True"]
    out = _python("import phalanx, shapes\nprint(shapes.check())\n" + COUNTS, cache, cwd=tmp_path)
    assert out[-2] == "ok"
    misses, hits = json.loads(out[-1])
    assert misses == 0 and hits >= 5  # __init__, __repr__, __eq__, __hash__, __setattr__, __delattr__


def test_a_foreign_or_unwritable_cache_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "foreign.bin").write_bytes(b"\x00not a cache at all" * 100)
    misses, hits = _counts("import phalanx_queue.__main__", tmp_path / "foreign.bin")
    assert misses > 100 and hits < misses

    blocked = tmp_path / "a-file"  # a cache "directory" that is a file: save says no and raises nothing
    blocked.write_text("")
    assert (
        _python(
            "import phalanx_queue.__main__\nfrom phalanx import dataclass_code as d\nprint(d.save())",
            blocked / "code.bin",
        )[-1]
        == "False"
    )


# What a class made from cached code must share with one made without it: everything dataclasses derives
# from the generated methods (their annotations feed the class's __doc__ and inspect.signature).
DESCRIBE = """
import dataclasses, inspect, json, re, sys
from phalanx_scheduler import __main__ as _s
from phalanx_binder import __main__ as _b
from phalanx_queue import __main__ as _q
classes = sorted(
    {c for m in list(sys.modules.values()) if (getattr(m, "__name__", "") or "").startswith("phalanx")
     for c in vars(m).values() if isinstance(c, type) and dataclasses.is_dataclass(c)},
    key=lambda c: f"{c.__module__}.{c.__qualname__}",
)
out = {
    f"{c.__module__}.{c.__qualname__}": [
        c.__doc__, str(inspect.signature(c.__init__)), repr(c.__init__.__annotations__),
        [n for n in ("__repr__", "__eq__", "__hash__", "__setattr__", "__lt__") if n in vars(c)],
    ]
    for c in classes
}
print(re.sub(r" at 0x[0-9a-f]+", "", json.dumps(out)))  # a default's address differs run to run
"""


def test_the_services_dataclasses_are_the_same_with_the_cache_and_without(tmp_path: Path) -> None:
    cache = tmp_path / "code.bin"
    env = {**os.environ, CACHE_ENV: str(cache)}
    built = subprocess.run([sys.executable, "-m", "phalanx.precompile"], capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stderr
    cached = json.loads(_python(DESCRIBE + COUNTS.replace("json.dumps", "str"), cache)[-2])
    plain = json.loads(_python(DESCRIBE, Path("off"))[-1])
    assert len(plain) > 80  # the three services load some 170 dataclasses; these are the module-level ones
    assert cached == plain
