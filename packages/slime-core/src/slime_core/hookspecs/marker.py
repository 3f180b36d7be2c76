"""The marker of slime's hook specifications (project name ``slime``)."""

import pluggy

hookspec = pluggy.HookspecMarker("slime")
