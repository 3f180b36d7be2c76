"""slime-router's plugin module, found through the ``slime`` entry-point group.

Declares the router's options, registers router ``sglang`` (``--router sglang``: the real
sglang-router, with the middleware front when middlewares are on) and the three built-in middlewares (``sessions``,
``metrics``, ``retry``) exactly as a third-party plugin registers its own. Middlewares are
named by ``"module:attribute"`` strings, so importing this module (as ``slime --help`` does)
imports neither aiohttp nor transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core import hookimpl

if TYPE_CHECKING:
    from slime_core.config import Config

GROUP = "router (slime-router)"


@hookimpl
def slime_add_options(options):
    options.add(
        "--router-middleware",
        nargs="+",
        default=None,
        group=GROUP,
        help="middlewares in front of sglang-router, outermost first: sessions, metrics, retry, or a plugin's",
    )
    options.add(
        "--sglang-router-ip",
        default=None,
        group=GROUP,
        help="address of an sglang-router that is already running: use it instead of starting one",
    )
    options.add("--sglang-router-port", type=int, default=None, group=GROUP, help="port of that sglang-router")
    options.add(
        "--router-middleware-retries",
        type=int,
        default=2,
        group=GROUP,
        help="retry middleware: attempts after the first when an engine died, failed or timed out",
    )
    options.add(
        "--router-middleware-timeout",
        type=float,
        default=None,
        group=GROUP,
        help="retry middleware: seconds one attempt may take before it counts as timed out (default: no limit)",
    )


@hookimpl
def slime_validate_config(config: Config):
    errors = []
    if bool(config.get("sglang_router_ip")) != bool(config.get("sglang_router_port")):
        errors.append(
            "--sglang-router-ip and --sglang-router-port name a running sglang-router together; give both or neither"
        )
    if (config.get("router_middleware_retries") or 0) < 0:
        errors.append(f"--router-middleware-retries must be >= 0, got {config.router_middleware_retries}")
    timeout = config.get("router_middleware_timeout")
    if timeout is not None and timeout <= 0:
        errors.append(f"--router-middleware-timeout must be a positive number of seconds, got {timeout}")
    if config.get("router") == "sglang" and config.get("rollout_top_p", 1.0) < 1 and not _forwards_custom_params():
        errors.append(
            "--rollout-top-p < 1 asks the engines for each token's nucleus in sampling_params.custom_params, "
            "which this sglang-router drops; use --router none (the engines in turn) or slime's sgl-router build"
        )
    if config.get("router") == "sglang" and config.get("use_rollout_routing_replay") and not _forwards_custom_params():
        errors.append(
            "--use-rollout-routing-replay asks the engines for each token's routed experts (return_routed_experts), "
            "which this sglang-router drops; use --router none (the engines in turn) or slime's sgl-router build"
        )
    return errors


def _forwards_custom_params() -> bool:
    """Whether sglang-router passes ``sampling_params.custom_params`` (top-p replay's request) and
    ``return_routed_experts`` (routing replay's) on to the engines. The PyPI build (0.3.2, checked)
    re-encodes ``/generate`` bodies through its own request types, which lack both; the build slime
    ships (its version names slime) is the one slime's top-p and routing replay run with."""
    from sglang_router.version import __version__

    return "slime" in __version__


@hookimpl
def slime_register_routers(register):
    register("sglang", "slime_router.launch:start_router")


@hookimpl
def slime_register_router_middlewares(register):
    register("sessions", "slime_router.sessions.middleware:sessions_middleware")
    register("metrics", "slime_router.metrics:metrics_middleware")
    register("retry", "slime_router.retry:retry_middleware")
