"""``python -m slime_sglang.sglang_server FLAGS``: ``python -m sglang.launch_server FLAGS`` with
the run's keys, which come in the environment, not on the command line.

SGLang takes its keys only as flags (``--api-key``, ``--admin-api-key``), and a process's
command line is readable by every local user (``/proc/PID/cmdline``, ``ps``). This launcher
takes the keys out of its environment (``slime_core.cluster.network.take_keys``), adds them to the
flags in its own ``sys.argv`` (which the kernel's copy of the command line does not follow)
and runs SGLang's launcher in this process. SGLang's own processes are started by
multiprocessing's spawn, which passes their arguments through a pipe, not a command line.
"""

from __future__ import annotations

import runpy
import sys

from slime_core.cluster.network import take_keys

LAUNCHER = "sglang.launch_server"


def keyed_argv(argv: list[str], api_key: str | None, admin_key: str | None) -> list[str]:
    """``argv`` with ``--api-key=`` / ``--admin-api-key=`` for the keys given (one word each:
    a key that starts with ``-`` stays a value)."""
    return [
        *argv,
        *([f"--api-key={api_key}"] if api_key else []),
        *([f"--admin-api-key={admin_key}"] if admin_key else []),
    ]


def main(argv: list[str]) -> None:
    api_key, admin_key = take_keys()
    sys.argv = [LAUNCHER, *keyed_argv(argv, api_key, admin_key)]
    runpy.run_module(LAUNCHER, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
