"""slime.utils.types: `Sample`, our `slime_core.Sample` with slime's fields (see `slime_compat.sample`)."""

from slime_compat.sample import Sample

__all__ = ["Sample"]
