"""slime.agent.sandbox: the `Sandbox` protocol slime's coding agents run commands through;
`E2BSandbox` and `exec_and_wait` import but raise on use (see `slime.agent`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from slime.agent import NEEDS_E2B, unavailable

__all__ = ["E2BSandbox", "Sandbox", "exec_and_wait"]

E2BSandbox = unavailable("slime.agent.sandbox.E2BSandbox")


@runtime_checkable
class Sandbox(Protocol):
    """An isolated machine an agent works in: entered with ``async with``, commands run and files
    written and read in it."""

    async def __aenter__(self) -> Sandbox: ...

    async def __aexit__(self, exc_type, exc, tb) -> None: ...

    async def exec(self, cmd: str, **kwargs): ...

    async def write_file(self, sandbox_path: str, content, *, user: str = "root") -> None: ...

    async def read_file(self, sandbox_path: str, *, user: str = "root") -> str: ...


async def exec_and_wait(sb: Sandbox, *, cmd: str, time_budget_sec: int, tag: str, **kwargs) -> tuple[int, str]:
    """Not provided here (slime's detached run of a command in an E2B sandbox): raises saying why."""
    raise RuntimeError(f"slime.agent.sandbox.exec_and_wait is not provided by slime-compat: {NEEDS_E2B}")
