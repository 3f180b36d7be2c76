"""Server processes that do not outlive the process that started them.

`die_with_parent` is a ``preexec_fn`` for ``subprocess.Popen``: in the child, before exec, it
asks Linux for SIGTERM when the parent dies (``PR_SET_PDEATHSIG``). A driver or Ray actor that
is killed outright (SIGKILL, OOM) then leaves no engine or router behind holding ports or GPUs.
The signal follows the *thread* that started the child, so start servers from a thread that
lives as long as they should (the main thread, or an actor's).
"""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent dies (Linux only)."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
