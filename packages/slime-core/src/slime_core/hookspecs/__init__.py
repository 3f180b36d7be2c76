"""Every hook a slime plugin can implement (one module per kind: `options`, `registration`,
`lifecycle`).

A plugin is a module or object with functions named like these specs, decorated with
``slime_core.hookimpl``. There are three kinds of hook:

1. options: a package adds its command-line/config options and subcommands;
2. registration: ``slime_register_<things>(register)`` adds named implementations that the
   config then selects by name (``register(name, obj)``; ``obj`` may be the object itself or
   a ``"module:attribute"`` string imported on first use, which keeps plugin modules light);
3. lifecycle: before/after pairs around each phase of the loop.

Unless a spec says otherwise, hooks run in the driver process (the one that runs
``slime run``).
"""

# Every spec of the three modules, so that pluggy finds them all on this module.
from slime_core.hookspecs.lifecycle import *  # noqa: F401,F403
from slime_core.hookspecs.marker import hookspec  # noqa: F401
from slime_core.hookspecs.options import *  # noqa: F401,F403
from slime_core.hookspecs.registration import *  # noqa: F401,F403
