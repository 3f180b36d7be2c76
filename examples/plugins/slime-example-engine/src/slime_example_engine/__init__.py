"""slime-example-engine: see the README."""

__version__ = "0.1.0"
