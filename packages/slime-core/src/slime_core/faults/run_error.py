"""`RunError`: an error that ends a run with a message that says it all.

Raised where the cause is known and named (a reward function and the sample it failed on, a
non-finite value: ``slime_core.faults.nonfinite``): ``slime run`` prints the message without a
traceback, ``slime.log`` keeps it with the run, and the command exits with 1.
"""

from __future__ import annotations


class RunError(RuntimeError):
    """The run stopped for the reason the message gives, with the fix."""
