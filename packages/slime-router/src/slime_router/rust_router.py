"""``python -m slime_router.rust_router FLAGS``: sglang-router's Rust load balancer, started as
``python -m sglang_router.launch_router FLAGS`` starts it, with the same flags and the same
``RouterArgs`` checks, but without importing that launcher's Python load balancer (MiniLB, for
debugging: FastAPI and uvicorn), which no slime run uses: importing the launcher takes 0.5
CPU-s, the Rust router's Python side 0.04 (sglang-router 0.3.2, 2 cores), on every run's
start-up. ``--mini-lb`` goes to sglang-router's own launcher, which has it.

The run's keys come in the environment (``slime_core.cluster.network.take_keys``), never as flags,
since a command line is readable by every local user: the API key becomes the router's
``api_key`` (required from every caller but ``/health``, and sent to the engines), the admin
key an admin key of its control plane (adding and removing engines).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> None:
    if "--mini-lb" in argv:
        from sglang_router.launch_router import main as launch

        sys.argv[1:] = argv
        launch()
        return
    import setproctitle
    from sglang_router.router import Router
    from sglang_router.router_args import RouterArgs

    setproctitle.setproctitle("sglang::router")
    parser = argparse.ArgumentParser(
        prog="python -m slime_router.rust_router",
        description="sglang-router's Rust router (flags of sglang_router.launch_router)",
    )
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    args = RouterArgs.from_cli_args(parser.parse_args(argv), use_router_prefix=False)
    _add_keys(args)
    args._validate_router_args()
    Router.from_args(args).start()


def _add_keys(args) -> None:
    """The run's keys from the environment onto sglang-router's ``RouterArgs`` (see the module docstring)."""
    from slime_core.cluster.network import take_keys

    api_key, admin_key = take_keys()
    if api_key:
        args.api_key = api_key
    if admin_key:  # RouterArgs' parsed form of "id:name:role:key"
        args.control_plane_api_keys = [*args.control_plane_api_keys, ("slime", "slime-run", admin_key, "admin")]


if __name__ == "__main__":
    main(sys.argv[1:])
