"""slime.utils.misc: `load_function` (``package.module.function``) and `SingletonMeta`."""

from slime_compat.functions import load_function

__all__ = ["SingletonMeta", "load_function"]


class SingletonMeta(type):
    """Metaclass of a class with one instance per process: the first call constructs it, later
    calls return it (their arguments unused); ``cls.clear_instances()`` forgets every instance."""

    _instances: dict = {}

    def __call__(cls, *args, **kwargs):
        if cls not in SingletonMeta._instances:
            SingletonMeta._instances[cls] = super().__call__(*args, **kwargs)
        return SingletonMeta._instances[cls]

    def clear_instances(cls) -> None:
        SingletonMeta._instances = {}
