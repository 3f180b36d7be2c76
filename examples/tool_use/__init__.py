"""Multi-turn tool use: a model calls a calculator while it answers (see README.md)."""
