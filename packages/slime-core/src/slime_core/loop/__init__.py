"""The loop of ``slime run`` (see `driver`)."""

from slime_core.loop.driver import run

__all__ = ["run"]
