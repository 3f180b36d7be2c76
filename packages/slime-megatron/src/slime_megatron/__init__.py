"""slime-megatron: see the package README."""

__version__ = "0.1.0"
