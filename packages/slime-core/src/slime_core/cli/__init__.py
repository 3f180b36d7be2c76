"""The ``slime`` command."""
