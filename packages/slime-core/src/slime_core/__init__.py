"""slime core: the contracts every slime package builds on.

Importing this package is cheap: torch, ray and transformers are imported only where
they are used (a test checks this in a fresh interpreter).
"""

import pluggy

from slime_core.sample import Sample, SampleStatus

__version__ = "0.1.0"

#: Marker for plugin functions: decorate ``slime_*`` hook implementations with it.
hookimpl = pluggy.HookimplMarker("slime")

__all__ = ["Sample", "SampleStatus", "hookimpl", "__version__"]
