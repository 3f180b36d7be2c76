"""Plugin discovery, the hook facade, and the registries plugins fill."""

from slime_core.plugins.manager import PluginError, Plugins
from slime_core.plugins.registry import KINDS, Registry, RegistryError

__all__ = ["KINDS", "PluginError", "Plugins", "Registry", "RegistryError"]
