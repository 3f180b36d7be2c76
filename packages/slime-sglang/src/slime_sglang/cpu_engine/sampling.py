"""Per-request sampling: the parameters of one request and the next-token draw for a batch.

Log-probs follow training's convention (``slime_core.algorithms.log_probs_from_logits``):
the log-prob of the sampled token under ``softmax(logits / temperature)`` in float32, over
the whole vocabulary (top-k / top-p only restrict which tokens can be drawn), and with
temperature 1 for greedy requests (temperature 0). On the same weights, the engine's
log-probs and the trainer's then agree to float tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """What one ``/generate`` request asked for (SGLang's names and defaults)."""

    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # nucleus: smallest set of tokens whose probability reaches top_p
    top_k: int = -1  # -1 = off
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()  # strings that end the output (cut from the text)
    stop_token_ids: frozenset[int] = frozenset()  # token ids that end the output
    sampling_seed: int | None = None  # a seeded request draws from its own generator
    ignore_eos: bool = False  # keep going past the model's EOS token
    skip_special_tokens: bool = True  # leave special tokens out of the text
    no_stop_trim: bool = False  # keep the matched stop string / token in the text


def sample_tokens(logits: torch.Tensor, params: list[SamplingParams],
                  generators: list[torch.Generator | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row and its log-prob.

    logits (B, V) any float dtype; ``params`` and ``generators`` have one entry per row (a
    row with a generator draws from it alone, so a seeded request is reproducible whatever
    else is in the batch). Returns tokens (B,) int64 and their log-probs (B,) float32.
    """
    temperatures = torch.tensor([p.temperature for p in params], dtype=torch.float32)
    greedy = temperatures == 0
    scaled = logits.float() / torch.where(greedy, 1.0, temperatures)[:, None]
    log_probs = torch.log_softmax(scaled, dim=-1)
    tokens = scaled.argmax(dim=-1)
    rows = (~greedy).nonzero().flatten().tolist()
    if rows:
        probs = _truncated_probs(scaled[rows], [params[i] for i in rows])
        tokens[rows] = _draw(probs, [generators[i] for i in rows])
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


def _truncated_probs(scaled: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """softmax(scaled) restricted to each row's top-k and top-p tokens (renormalised)."""
    probs = torch.softmax(scaled, dim=-1)
    if all(p.top_k < 0 and p.top_p >= 1.0 for p in params):
        return probs
    vocab = scaled.shape[-1]
    top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params])
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab)
    # A token is dropped past the k-th rank, or when the more probable tokens already reach top_p.
    drop = (ranks[None, :] >= top_k[:, None]) | (sorted_probs.cumsum(-1) - sorted_probs > top_p[:, None])
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def _draw(probs: torch.Tensor, generators: list[torch.Generator | None]) -> torch.Tensor:
    """One token per row from (unnormalised) probabilities; seeded rows use their generator."""
    tokens = torch.empty(len(generators), dtype=torch.long)
    shared = [i for i, g in enumerate(generators) if g is None]
    if shared:
        tokens[shared] = torch.multinomial(probs[shared], 1).squeeze(-1)
    for i, generator in enumerate(generators):
        if generator is not None:
            tokens[i] = torch.multinomial(probs[i], 1, generator=generator).squeeze(-1)
    return tokens
