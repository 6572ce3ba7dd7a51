"""A cache of the code that `dataclasses` generates, built beside the services' bytecode.

Each `@dataclass` writes the source of its `__init__`, `__repr__`, `__eq__`, `__hash__` and (frozen)
`__setattr__` / `__delattr__` and compiles it with `exec` when its module is imported. A Python 3.11
service compiles 170-420 of those at every start: 30-70 ms of CPU in each of the queue, binder and
scheduler (about a third of what importing their own modules costs), on the path to the first binding.

The source is a pure function of the class's fields and options, so its compiled code is too: the code
object is cached by source text, as CPython caches a module's bytecode in __pycache__, and only the
compilation is skipped (the code still runs with the class's module globals). `install()`, which
`phalanx/__init__` calls before any Phalanx module defines a dataclass, routes the dataclasses module's
`exec` calls through the cache (that module resolves `exec` through its own globals first).

The cache is built the way the bytecode is, ahead of time: `python -m phalanx.precompile` imports what the
services import and writes what they compiled (`make precompile`, and the container image's build,
after compileall). At run time nothing is written, so a read-only image stays as it was built. The file is
read with `marshal`, as a .pyc is, and trusted as much: it lives where this package's .pyc files do. A
missing, unreadable or foreign file is ignored, and source the cache does not hold (a class changed since)
is compiled as before.
"""

from __future__ import annotations

import builtins
import dataclasses
import marshal
import os
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import CodeType
from typing import Any

# The file's header: this format (1 was compiled with this module's future flags) and the interpreter's
# bytecode magic number, so another Python's file is ignored.
_MAGIC = b"phalanx-dataclass-code-2\n" + MAGIC_NUMBER


class CodeCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.codes: dict[str, CodeType] = {}
        self.hits = 0
        self.misses = 0

    def load(self) -> None:
        if self.path is None:
            return
        try:
            data = self.path.read_bytes()
        except OSError:
            return
        if not data.startswith(_MAGIC):
            return
        try:
            codes = marshal.loads(data[len(_MAGIC) :])
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(codes, dict):
            self.codes = {k: v for k, v in codes.items() if isinstance(k, str) and isinstance(v, CodeType)}

    def exec(self, source: Any, globals: dict[str, Any] | None = None, locals: Any = None) -> None:
        if not isinstance(source, str):
            builtins.exec(source, globals, locals)
            return
        code = self.codes.get(source)
        if code is None:
            self.misses += 1
            # dont_inherit: exec's own compilation takes the dataclasses module's future flags (none), not
            # this module's (`annotations` would turn __init__'s annotations into the names of its locals).
            code = self.codes[source] = compile(source, "<string>", "exec", dont_inherit=True)
        else:
            self.hits += 1
        builtins.exec(code, globals, locals)

    def save(self) -> bool:
        """Writes what this process holds if it compiled anything the file lacked; True if it wrote."""
        if self.path is None or self.misses == 0:
            return False
        import tempfile  # only when writing: importing it costs a start ~3 ms

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Written aside and renamed: a service starting meanwhile never reads half a file.
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".")
        except OSError:  # a read-only install: the services compile, as without the cache
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + marshal.dumps(self.codes))
            os.chmod(tmp, 0o644)  # as a .pyc: an image built as root is run by another user
            os.replace(tmp, self.path)
        except OSError:  # a full disk, say: no half-written file is left behind
            os.unlink(tmp)
            return False
        self.misses = 0
        return True


CACHE_ENV = "PHALANX_DATACLASS_CODE"


def cache_path() -> Path:
    """$PHALANX_DATACLASS_CODE (`off`: no cache), else beside this package's bytecode: __pycache__, or its
    mirror under PYTHONPYCACHEPREFIX."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    here = Path(__file__).resolve().parent
    name = f"dataclass_code.{sys.implementation.cache_tag}.bin"
    if sys.pycache_prefix:
        return Path(sys.pycache_prefix) / here.relative_to(here.anchor) / name
    return here / "__pycache__" / name


_cache: CodeCache | None = None


def install() -> CodeCache | None:
    """Routes the dataclasses module's compilations through the cache (once per process)."""
    global _cache
    if os.environ.get(CACHE_ENV) == "off":  # each dataclass compiled at import, as without this module
        return None
    if _cache is None and sys.implementation.cache_tag is not None:
        _cache = CodeCache(cache_path())
        _cache.load()
        dataclasses.exec = _cache.exec  # type: ignore[attr-defined]
    return _cache


def fresh() -> CodeCache | None:
    """An empty cache in place of the one loaded (the build step's: the file it saves then holds what its
    imports compile, and no source a class had before it changed)."""
    global _cache
    loaded = install()
    if loaded is None:
        return None
    _cache = CodeCache(loaded.path)
    dataclasses.exec = _cache.exec  # type: ignore[attr-defined]
    return _cache


def save() -> bool:
    return _cache.save() if _cache is not None else False
