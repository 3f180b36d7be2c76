"""Run megatron-core on CPU (gloo) where there is no CUDA device: for development and CI.

megatron-core 0.16 assumes CUDA in five ways, and ``enable_cpu_mode()`` answers each as
narrowly as it can, only where megatron needs it:

1. RNG: ``tensor_parallel.random`` keeps one CUDA generator state per parallel region
   (``model_parallel_cuda_manual_seed``, ``get_cuda_rng_tracker().fork()``, activation
   recomputation). :class:`CpuRNGStatesTracker` keeps the same named states for the CPU
   generator, and recomputation saves and restores the CPU generator's state.
2. ``torch.cuda.current_device()`` used as the device of new tensors or ``.to(...)``;
3. ``device="cuda"`` in tensor factories (``torch.zeros(..., device="cuda")``).
   For 2 and 3, the ``torch`` global of each module in :data:`CPU_TORCH_MODULES` (found by
   running a tensor- and data-parallel model's forward, backward with recomputation,
   optimizer step and checkpoint on CPU) is replaced by :data:`cpu_torch`, a view of torch
   whose factories put "cuda" tensors on the CPU and whose ``cuda.current_device()`` is the
   CPU.
4. The optimizers sort parameters by ``tensor.type() == "torch.cuda.FloatTensor"``: the
   calls in :data:`CUDA_TYPE_CHECKS` run inside :func:`cuda_type_names`; and a tied
   embedding split over pipeline stages is moved with ``tensor.cuda()`` before its two
   copies are all-reduced: the calls in :data:`CUDA_MOVES` run inside :func:`cuda_moves_stay_on_cpu`.
5. With context parallelism the rotary embeddings take the rank's chunks of their positions
   through ``get_pos_emb_on_this_cp_rank``, whose index goes through pinned memory to CUDA:
   the modules in :data:`CP_POSITION_MODULES` get :func:`pos_emb_on_this_cp_rank` instead.

Two more changes are for speed, not correctness. Megatron's ``jit_fuser`` is ``torch.compile``,
and on CPU compiling its fused functions (the MoE router's, for one) took 2.2 s of each rank
process's first step for ops that gain nothing from it at CPU sizes: :func:`import_megatron`
imports megatron with ``torch.compile`` as a no-op, so its decorators leave the functions as
they are and torch's inductor is not imported (1.2 CPU-s per process), and keeps W&B out of
megatron's inference code, which slime never runs (0.6 CPU-s); :func:`run_jit_fused_eagerly`
puts the plain functions back where megatron was imported before.

Code outside those modules and calls sees no change, and nothing changes on a machine with
CUDA (``enable_cpu_mode`` refuses to run there). Not covered: the all-to-all MoE token
dispatcher (CUDA streams; the families pick the all-gather one on CPU, and the rank gives
its expert-parallel ranks micro-batches of one shape, see ``slime_megatron.inputs``).
Sequence parallelism runs here with the norms of ``slime_megatron.models.norms`` (megatron's
local one refuses it on any device).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import types

import torch

#: The megatron modules whose ``torch`` global becomes :data:`cpu_torch`, each with the
#: CUDA-only calls that made it necessary (megatron-core 0.16.1).
CPU_TORCH_MODULES = {
    "megatron.core.models.common.embeddings.rotary_pos_embedding": "RotaryEmbedding.get_emb: "
    "inv_freq.to(device=torch.cuda.current_device())",
    "megatron.core.models.common.embeddings.yarn_rotary_pos_embedding": "YarnRotaryEmbedding (multi-latent attention's "
    "YaRN): inv_freq.to(device=torch.cuda.current_device())",
    "megatron.core.transformer.utils": "get_default_causal_mask: torch.ones(sq, sq, device='cuda'), the attention "
    "softmax's causal mask",
    "megatron.core.utils": "GlobalMemoryBuffer.get_tensor (DotProductAttention's score buffer): "
    "torch.empty(device=current_device())",
    "megatron.core.tensor_parallel.mappings": "the tensor-parallel all-gathers and reduce-scatters: "
    "torch.empty(device=current_device())",
    "megatron.core.tensor_parallel.layers": "sequence parallelism: the linear layers' backward all-gathers its input "
    "into torch.empty(device=current_device())",
    "megatron.core.transformer.moe.router": "TopKRouter.gating: weight.data.to(device=torch.cuda.current_device())",
    "megatron.core.distributed.param_and_grad_buffer": "DDP's contiguous parameter and gradient buffers: "
    "torch.zeros(device=current_device())",
    "megatron.core.pipeline_parallel.schedules": (
        "forward_backward_*: total_num_tokens = torch.zeros([], device='cuda')"
    ),
    "megatron.core.pipeline_parallel.p2p_communication": "pipeline parallelism: the activations and gradients "
    "stages send each other, and their shapes, land in torch.empty(device=current_device()); "
    "torch.cuda.synchronize() after each batched send/receive",
    "megatron.core.optimizer.optimizer": "the optimizers' loss scale and overflow flags: torch.tensor([1.0], "
    "device='cuda')",
    "megatron.core.optimizer.clip_grads": "gradient norm and clipping: torch.zeros(1, device='cuda')",
    "megatron.core.dist_checkpointing.strategies.filesystem_async": "FileSystemWriterAsync.preload_tensors: "
    "torch.cuda.synchronize()",
    "megatron.core.dist_checkpointing.strategies.state_dict_saver": "save_state_dict_async_finalize: "
    "torch.tensor([failures], device=current_device())",
}

#: The modules that call ``get_pos_emb_on_this_cp_rank`` (item 5 of the module docstring).
CP_POSITION_MODULES = (
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    "megatron.core.models.common.embeddings.yarn_rotary_pos_embedding",
)

_CUDA_FACTORIES = ("empty", "zeros", "ones", "full", "tensor", "arange", "rand", "randn", "randint")


def _cpu_device(device):
    """The CPU for a CUDA device (``"cuda"``, ``"cuda:0"``, an index, ``torch.device("cuda")``)."""
    if device is not None and (isinstance(device, int) or torch.device(device).type == "cuda"):
        return torch.device("cpu")
    return device


def _on_cpu(factory):
    def factory_on_cpu(*args, device=None, **kwargs):
        return factory(*args, device=_cpu_device(device), **kwargs)

    factory_on_cpu.__name__ = factory.__name__
    factory_on_cpu.__doc__ = f"``torch.{factory.__name__}`` with a CUDA ``device`` replaced by the CPU."
    return factory_on_cpu


class _CpuCuda(types.ModuleType):
    """``torch.cuda`` as the patched modules see it: the current device is the CPU."""

    def __init__(self):
        super().__init__("torch.cuda")

    def __getattr__(self, name):
        return getattr(torch.cuda, name)

    @staticmethod
    def current_device() -> torch.device:
        return torch.device("cpu")

    @staticmethod
    def synchronize(device=None) -> None:
        """Nothing to wait for: CPU operations are synchronous."""


class _CpuTorch(types.ModuleType):
    """``torch`` as the patched modules see it: CUDA tensor factories make CPU tensors."""

    def __init__(self):
        super().__init__("torch")
        self.cuda = _CpuCuda()
        for name in _CUDA_FACTORIES:
            setattr(self, name, _on_cpu(getattr(torch, name)))

    def __getattr__(self, name):
        return getattr(torch, name)


#: The view of torch that the modules in :data:`CPU_TORCH_MODULES` see in CPU mode.
cpu_torch = _CpuTorch()


class CpuRNGStatesTracker:
    """megatron's ``CudaRNGStatesTracker`` for the CPU generator.

    Serves ``tensor_parallel.model_parallel_cuda_manual_seed`` (``add`` seeds the
    data-, tensor- and expert-parallel states) and ``get_cuda_rng_tracker().fork(name)``
    (dropout and weight init inside a parallel region draw from that region's state, then
    the outer state is restored), the same contract as the CUDA tracker, whose ``add`` and
    ``fork`` call ``torch.cuda.get_rng_state``, which fails without CUDA.
    """

    def __init__(self, *args, **kwargs):
        self.reset()

    def reset(self):
        self.states_: dict[str, torch.Tensor] = {}
        self.seeds_: set[int] = set()
        self._is_initialized = False

    def is_initialized(self) -> bool:
        return self._is_initialized

    def get_states(self) -> dict[str, torch.Tensor]:
        return dict(self.states_)

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self._is_initialized = True
        self.states_ = states

    def add(self, name: str, seed: int) -> None:
        if seed in self.seeds_ or name in self.states_:
            raise ValueError(f"RNG state '{name}' or seed {seed} is already tracked")
        self._is_initialized = True
        self.seeds_.add(seed)
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        if name not in self.states_:
            raise ValueError(f"RNG state '{name}' is not tracked; call model_parallel_cuda_manual_seed first")
        outer = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)


def _get_rng_state(*args, **kwargs) -> torch.Tensor:
    """Replaces ``tensor_parallel.random._get_cuda_rng_state``: the CPU generator's state.

    Activation recomputation (``CheckpointFunction``) saves it before the forward pass and
    restores it before recomputing, so dropout draws the same masks twice.
    """
    return torch.get_rng_state()


def _set_rng_state(state: torch.Tensor, *args, **kwargs) -> None:
    """Replaces ``tensor_parallel.random._set_cuda_rng_state``: see :func:`_get_rng_state`."""
    torch.set_rng_state(state)


@contextlib.contextmanager
def cuda_type_names():
    """Within this context, ``tensor.type()`` (no argument) of a CPU tensor names the CUDA
    type (``torch.cuda.FloatTensor``), because megatron's optimizers sort parameters by it:
    see :data:`CUDA_TYPE_CHECKS`. ``tensor.type(dtype)`` conversions are unchanged.
    """
    original = torch.Tensor.type

    def type_as_cuda(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None and self.device.type == "cpu":
            return original(self).replace("torch.", "torch.cuda.", 1)
        return original(self, dtype, non_blocking, **kwargs)

    torch.Tensor.type = type_as_cuda
    try:
        yield
    finally:
        torch.Tensor.type = original


#: The megatron calls that run inside :func:`cuda_type_names`: (module, attribute path, why).
CUDA_TYPE_CHECKS = (
    # MegatronOptimizer.clip_grad_norm asserts grad.type() == 'torch.cuda.FloatTensor'
    ("megatron.core.optimizer.optimizer", "clip_grad_by_total_norm_fp32"),
    # sorts parameters into float16 / fp32 groups by param.type(), TypeError for CPU types
    ("megatron.core.optimizer.optimizer", "Float16OptimizerWithFloat16Params.__init__"),
    ("megatron.core.optimizer.distrib_optimizer", "DistributedOptimizer.__init__"),
)


@contextlib.contextmanager
def cuda_moves_stay_on_cpu():
    """Within this context ``tensor.cuda()`` of a CPU tensor is the tensor itself (see
    :data:`CUDA_MOVES`); every other ``.cuda()`` call is unchanged."""
    original = torch.Tensor.cuda

    def stay(self, *args, **kwargs):
        return self if self.device.type == "cpu" else original(self, *args, **kwargs)

    torch.Tensor.cuda = stay
    try:
        yield
    finally:
        torch.Tensor.cuda = original


#: The megatron calls that run inside :func:`cuda_moves_stay_on_cpu`: (module, attribute path, why).
CUDA_MOVES = (
    # pipeline parallelism with tied embeddings: the last stage's copy of the embedding (its
    # output layer) starts as the first stage's by an all-reduce over both, after
    # weight.data = weight.data.cuda()
    ("megatron.core.models.common.language_module.language_module", "LanguageModule.setup_embeddings_and_output_layer"),
)


def _within(context, function):
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        with context():
            return function(*args, **kwargs)

    return wrapped


def _patch_calls() -> None:
    """Run the calls of :data:`CUDA_TYPE_CHECKS` and :data:`CUDA_MOVES` inside their contexts."""
    for context, calls in ((cuda_type_names, CUDA_TYPE_CHECKS), (cuda_moves_stay_on_cpu, CUDA_MOVES)):
        for module_name, path in calls:
            owner = importlib.import_module(module_name)
            *parents, name = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            setattr(owner, name, _within(context, getattr(owner, name)))


def pos_emb_on_this_cp_rank(pos_emb: torch.Tensor, seq_dim: int, cp_group) -> torch.Tensor:
    """megatron's ``get_pos_emb_on_this_cp_rank`` with the index on ``pos_emb``'s device: of
    2·CP chunks along ``seq_dim``, the rank's r and 2·CP − 1 − r (`slime_megatron.context`)."""
    size, rank = cp_group.size(), cp_group.rank()
    index = torch.tensor([rank, 2 * size - 1 - rank], device=pos_emb.device)
    chunks = pos_emb.view(*pos_emb.shape[:seq_dim], 2 * size, -1, *pos_emb.shape[seq_dim + 1 :])
    chunks = chunks.index_select(seq_dim, index)
    return chunks.view(*chunks.shape[:seq_dim], -1, *chunks.shape[seq_dim + 2 :])


_enabled = False


def import_megatron() -> None:
    """Import ``megatron.core`` for CPU mode: its ``@jit_fuser`` decorators (``torch.compile``,
    bound when megatron is imported) leave the functions uncompiled, and its inference contexts
    find no W&B. Does nothing where CUDA is available or megatron is imported already."""
    if torch.cuda.is_available() or "megatron.core" in sys.modules:
        return
    compile_, wandb = torch.compile, sys.modules.get("wandb")
    torch.compile = _no_compile
    if wandb is None:
        sys.modules["wandb"] = None  # an import of it raises ImportError, as if not installed
    try:
        importlib.import_module("megatron.core")
    finally:
        torch.compile = compile_
        if wandb is None:
            del sys.modules["wandb"]


def _no_compile(model=None, **options):
    """``torch.compile`` while megatron is imported in CPU mode: the function itself."""
    return model if model is not None else _eager


def enable_cpu_mode() -> None:
    """Make megatron-core run on CPU: call once per process, after importing torch and
    before building a model; calling it again does nothing.

    Only for machines without CUDA: with a CUDA device megatron must use it, so this
    raises there.
    """
    global _enabled
    if _enabled:
        return
    if torch.cuda.is_available():
        raise RuntimeError("enable_cpu_mode() is for machines without CUDA; this one has a CUDA device, use it")
    import_megatron()
    from megatron.core.tensor_parallel import random

    random._CUDA_RNG_STATE_TRACKER = CpuRNGStatesTracker()
    random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    random._get_cuda_rng_state, random._set_cuda_rng_state = _get_rng_state, _set_rng_state
    _patch_calls()
    for module in CPU_TORCH_MODULES:
        importlib.import_module(module).torch = cpu_torch
    for module in CP_POSITION_MODULES:
        importlib.import_module(module).get_pos_emb_on_this_cp_rank = pos_emb_on_this_cp_rank
    run_jit_fused_eagerly()
    _enabled = True


def run_jit_fused_eagerly() -> int:
    """Replace every ``torch.compile`` wrapper that megatron's modules hold (``@jit_fuser``
    functions and methods, and the names other modules imported them by) with the function
    it wraps, and make ``jit_fuser`` a no-op for functions decorated later (nested ones are
    decorated at each call). Returns how many wrappers were replaced."""
    replaced = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("megatron.") or module is None:
            continue
        if "jit_fuser" in vars(module):
            module.jit_fuser = _eager
        for owner in [module, *(v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name)]:
            for attribute, value in list(vars(owner).items()):
                original = compiled_original(value)
                if original is not None:
                    setattr(owner, attribute, original)
                    replaced += 1
    return replaced


def compiled_original(value):
    """The function a ``torch.compile`` wrapper function wraps; None for anything else (megatron
    also holds ``MagicMock`` stand-ins for missing packages, which answer every attribute)."""
    original = getattr(value, "_torchdynamo_orig_callable", None) if isinstance(value, types.FunctionType) else None
    return original if isinstance(original, types.FunctionType) else None


def _eager(function):
    """``jit_fuser`` in CPU mode: the function itself."""
    return function


def cpu_mode_enabled() -> bool:
    """Whether :func:`enable_cpu_mode` ran in this process."""
    return _enabled
