"""Child processes that end with their parent (Linux), so an interrupted run leaves no servers behind.

No `preexec_fn`: running Python between fork and exec in a parent that has gRPC threads can deadlock
the child before it ever execs (gRPC's fork handlers and the loader lock run in a copy of a
multi-threaded process). Without it, subprocess uses vfork + exec, which runs no fork handlers. The
parent-death signal is set after exec instead: by the Python services themselves (see
`phalanx.lifecycle`) and, for other binaries, by a bare Python that sets it and then execs the binary in
its place (the signal survives exec; no dependency on util-linux's setpriv, which a bare CI machine may
lack, and unlike setpriv it checks that the parent has not died already).
"""

from __future__ import annotations

import os
import subprocess
import sys

from phalanx.lifecycle import PARENT_PID_ENV


def exit_with_parent_env(env: dict[str, str]) -> dict[str, str]:
    """`env` plus the variable that makes a Phalanx service exit when this process dies."""
    return {**env, PARENT_PID_ENV: str(os.getpid())}


# Run by a bare interpreter (-I -S: no site, no user paths) so the wrapper costs tens of milliseconds.
_EXEC_WITH_PDEATHSIG = (
    "import ctypes, os, sys; ctypes.CDLL(None, use_errno=True).prctl(1, 15); "  # PR_SET_PDEATHSIG, SIGTERM
    "os.getppid() == int(sys.argv[1]) or sys.exit('the starting process has already exited'); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def exit_with_parent_argv(argv: list[str]) -> list[str]:
    """`argv` wrapped so the kernel SIGTERMs that program when this process dies (same pid: the wrapper
    execs it). Unchanged off Linux, where the child simply outlives an interrupted parent."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-I", "-S", "-c", _EXEC_WITH_PDEATHSIG, str(os.getpid()), *argv]


def stop_child(proc: subprocess.Popen[bytes] | subprocess.Popen[str], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace` seconds; returns once it is reaped."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
