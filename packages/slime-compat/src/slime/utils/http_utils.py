"""slime.utils.http_utils: ``await post(url, payload)`` / ``await get(url)`` (see `slime_compat.http`)."""

from slime_compat.http import get, post

__all__ = ["get", "post"]
