"""`SlimeArgs`: the ``args`` namespace slime passes first to every user function.

slime hands its functions the global ``argparse.Namespace``; our run has a `Config` whose
keys follow slime's flag names. `SlimeArgs` reads through to the config and keeps what a
function writes (``args.my_counter = ...``) in its own dict, so the writes are seen by later
calls in the same process without changing the run's config. Runtime fields slime fills in
(``sglang_router_ip`` / ``sglang_router_port``) come from the engine address of the call, and
the settings of ``--custom-config-path`` are set on it as it is made, in whichever process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from slime_core.config.config import Config

_BY_CONFIG: dict[int, SlimeArgs] = {}
_RUN: list = []  # the config of the run this process drives (set by slime_before_run)


class SlimeArgs:
    """A writable view of a `Config` under slime's attribute names."""

    def __init__(self, config: Config):
        self.__dict__["_config"] = config

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(self.__dict__["_config"], name)
        except AttributeError as exc:
            raise AttributeError(
                f"slime args: {exc}; slime-compat passes the run's options and what your "
                "functions set on args, and this run has no such option"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value

    def set_router(self, url: str | None) -> None:
        """Fill ``sglang_router_ip`` / ``sglang_router_port`` from the address generation goes to,
        and let `slime_compat.http` send the run's token there (slime's functions post to it
        with ``slime.utils.http_utils.post``, which sends no key of its own)."""
        if url:
            parts = urlsplit(url)
            self.__dict__["sglang_router_ip"], self.__dict__["sglang_router_port"] = parts.hostname, parts.port
            network = getattr(self.__dict__["_config"], "network", None)
            if network is not None and network.token:
                from slime_compat.http import send_token_to

                send_token_to(url, network.token)


def _set_parsed_values(args: SlimeArgs) -> None:
    """The values slime's args hold parsed where our options hold text: ``--apply-chat-template-kwargs``
    is a dict there (slime parses its JSON), so ``**args.apply_chat_template_kwargs`` works."""
    from slime_core.data.prompt_dataset import chat_template_kwargs

    args.__dict__["apply_chat_template_kwargs"] = chat_template_kwargs(args.__dict__["_config"])


def _set_custom_config(args: SlimeArgs) -> None:
    """The settings of ``--custom-config-path``, on the args of any process of the run (the
    driver's rollout functions and the train ranks' hooks alike), as slime sets them."""
    path = args.__dict__["_config"].get("custom_config_path")
    if path:
        from slime_compat.custom_config import custom_settings

        args.__dict__.update(custom_settings(path))


def config_of(args) -> object:
    """The `Config` behind ``args`` (``args`` itself when it is one)."""
    return args.__dict__["_config"] if isinstance(args, SlimeArgs) else args


def slime_args(config: Config | SlimeArgs, engine=None) -> SlimeArgs:
    """The one `SlimeArgs` of ``config`` in this process (so writes persist across calls),
    with the router address of ``engine`` (anything with a ``url``), if given."""
    if isinstance(config, SlimeArgs):
        return config
    args = _BY_CONFIG.get(id(config))
    if args is None or args.__dict__["_config"] is not config:
        args = _BY_CONFIG[id(config)] = SlimeArgs(config)
        _set_parsed_values(args)
        _set_custom_config(args)
    args.set_router(getattr(engine, "url", None))
    return args


def remember_run(config: Config) -> None:
    """Record the run's config, for the adapters whose contract passes none (buffer filters)."""
    _RUN[:] = [config]


def run_args() -> SlimeArgs:
    """`slime_args` of the run recorded by `remember_run`."""
    if not _RUN:
        raise RuntimeError("slime-compat: no run recorded; slime_before_run records it before the loop starts")
    return slime_args(_RUN[0])
