"""Child processes that end with their parent (Linux), so an interrupted run leaves no servers behind.

No `preexec_fn`: running Python between fork and exec in a parent that has gRPC threads can deadlock
the child before it ever execs (gRPC's fork handlers and the loader lock run in a copy of a
multi-threaded process). Without it, subprocess uses vfork + exec, which runs no fork handlers. The
parent-death signal is set after exec instead: by the Python services themselves (see
`phalanx.lifecycle`) and, for other binaries, by util-linux's `setpriv --pdeathsig`.
"""

from __future__ import annotations

import os
import shutil
import sys

from phalanx.lifecycle import PARENT_PID_ENV


def exit_with_parent_env(env: dict[str, str]) -> dict[str, str]:
    """`env` plus the variable that makes a Phalanx service exit when this process dies."""
    return {**env, PARENT_PID_ENV: str(os.getpid())}


def exit_with_parent_argv(argv: list[str]) -> list[str]:
    """`argv` wrapped so the kernel SIGTERMs that program when this process dies (unchanged where
    setpriv is missing: the child then simply outlives an interrupted parent)."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "TERM", *argv] if setpriv else argv
