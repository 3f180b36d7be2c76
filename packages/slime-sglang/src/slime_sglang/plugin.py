"""slime-sglang's plugin module, found through the ``slime`` entry-point group.

This is where the package registers rollout engines (SGLang servers and the CPU engine), the
default rollout function, and ``slime engine serve`` (the CPU engine's server). It imports
nothing heavy, so ``slime --help`` stays fast.
"""

from slime_core import hookimpl


@hookimpl
def slime_add_commands(subparsers):
    from slime_sglang.cpu_engine.serve_command import add_engine_command

    add_engine_command(subparsers)


@hookimpl
def slime_register_rollout_engines(register):
    register("sglang", "slime_sglang.servers:sglang_command")
    register("cpu", "slime_sglang.servers:cpu_engine_command")


@hookimpl
def slime_register_rollout_functions(register):
    register("default", "slime_sglang.rollout:default_rollout")


@hookimpl
def slime_register_generate_functions(register):
    register("default", "slime_sglang.generate:generate_sample")
