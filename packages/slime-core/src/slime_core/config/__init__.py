"""The run configuration: declared options, YAML + command-line loading, validation."""

from slime_core.config.config import Config, ConfigError, FrozenConfigError
from slime_core.config.loader import load_config, load_overrides
from slime_core.config.options import Option, OptionSet

__all__ = ["Config", "ConfigError", "FrozenConfigError", "Option", "OptionSet", "load_config", "load_overrides"]
