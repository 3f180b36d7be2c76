"""slime-compat: THUDM slime's plugin code on slime-core, unchanged.

The ``slime`` namespace package beside this one (``slime.utils.types``,
``slime.rollout.filter_hub``, ...) re-exports what slime's user code imports, backed by
slime-core; it has no ``__init__.py``, so this distribution's import name stays
``slime_compat``. This package's plugin (`slime_compat.plugin`) runs slime's ``--*-path``
functions through adapters.
"""

__version__ = "0.1.0"
