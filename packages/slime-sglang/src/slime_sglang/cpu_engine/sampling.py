"""Per-request sampling: the parameters of one request and the next-token draw for a batch.

Log-probs follow training's convention (``slime_core.algorithms.log_probs_from_logits``):
the log-prob of the sampled token under ``softmax(logits / temperature)`` in float32, over
the whole vocabulary (top-k / top-p only restrict which tokens can be drawn), and with
temperature 1 for greedy requests (temperature 0). On the same weights, the engine's
log-probs and the trainer's then agree to float tolerance.

A request that asks for top-p replay (``custom_params.return_top_p_token_ids``) gets, for
each token, the nucleus it was drawn from (the ids top-k and top-p leave; a greedy token's is
itself; a draw from the whole vocabulary has an empty one, meaning just that), and its log-prob
renormalised over that nucleus: training scores it over the same tokens
(``slime_core.algorithms.nucleus_keep_mask``), so the two still agree.
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
    min_new_tokens: int = 0  # no stop token, EOS or stop string ends the output before this many
    stop: tuple[str, ...] = ()  # strings that end the output (cut from the text)
    stop_token_ids: frozenset[int] = frozenset()  # token ids that end the output
    sampling_seed: int | None = None  # a seeded request draws from its own generator
    ignore_eos: bool = False  # keep going past the model's EOS token
    skip_special_tokens: bool = True  # leave special tokens out of the text
    no_stop_trim: bool = False  # keep the matched stop string / token in the text
    return_top_p_token_ids: bool = False  # custom_params: report each token's nucleus (top-p replay)

    @property
    def restricted(self) -> bool:
        """Whether top-k or top-p leaves some tokens out of a sampled (not greedy) draw."""
        return self.top_k > 0 or self.top_p < 1.0


def sample_tokens(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]
) -> tuple[torch.Tensor, torch.Tensor, list[list[int] | None]]:
    """Draw one token per row, its log-prob and, for top-p replay, its nucleus.

    logits (B, V) any float dtype; ``params`` and ``generators`` have one entry per row (a
    row with a generator draws from it alone, so a seeded request is reproducible whatever
    else is in the batch). Returns tokens (B,) int64, their log-probs (B,) float32 and per
    row the nucleus ids (None for rows that did not ask; the module docstring says what they
    hold and how they change the log-prob).
    """
    temperatures = torch.tensor([p.temperature for p in params], dtype=torch.float32)
    greedy = temperatures == 0
    scaled = logits.float() / torch.where(greedy, 1.0, temperatures)[:, None]
    probs = torch.softmax(scaled, dim=-1)
    allowed = _allowed(probs, params)
    tokens = scaled.argmax(dim=-1)
    rows = (~greedy).nonzero().flatten().tolist()
    if rows:
        drawable = probs[rows] if allowed is None else probs[rows].masked_fill(~allowed[rows], 0.0)
        tokens[rows] = _draw(drawable, [generators[i] for i in rows])
    log_probs = torch.log_softmax(scaled, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    nuclei = [
        _nucleus(scaled, allowed, tokens, log_probs, row, p) if p.return_top_p_token_ids else None
        for row, p in enumerate(params)
    ]
    return tokens, log_probs, nuclei


def _nucleus(scaled, allowed, tokens, log_probs, row: int, params: SamplingParams) -> list[int]:
    """The nucleus row ``row``'s token was drawn from (the module docstring says what it holds);
    renormalises the row's entry of ``log_probs`` over it, in place."""
    if params.temperature == 0:
        log_probs[row] = 0.0
        return [int(tokens[row])]
    if not params.restricted:
        return []
    log_probs[row] = torch.log_softmax(scaled[row].masked_fill(~allowed[row], float("-inf")), -1)[tokens[row]]
    return allowed[row].nonzero().flatten().tolist()


def _allowed(probs: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor | None:
    """(B, V) bool: the tokens each row may draw under its top-k and top-p, or None when no
    row restricts them."""
    if not any(p.restricted for p in params):
        return None
    vocab = probs.shape[-1]
    top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params])
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab)
    # A token is dropped past the k-th rank, or when the more probable tokens already reach top_p.
    drop = (ranks[None, :] >= top_k[:, None]) | (sorted_probs.cumsum(-1) - sorted_probs > top_p[:, None])
    return torch.empty_like(drop).scatter_(-1, order, ~drop)


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
