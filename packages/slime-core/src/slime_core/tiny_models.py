"""Tiny tokenizers (and, built on them, tiny models) for tests, examples and laptops.

Nothing here downloads anything: the tokenizer is built with the `tokenizers` library from
a fixed character vocabulary, so tests and the CPU example run offline.
"""

from __future__ import annotations

import string
from pathlib import Path

PAD, EOS, USER, ASSISTANT = "<pad>", "<|endoftext|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = [PAD, EOS, USER, ASSISTANT]
#: One token per character: printable ASCII and newline, after the four special tokens (100 in all).
CHARACTERS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}" + ASSISTANT + "{{ message['content'] }}" + EOS + "\n"
    "{% elif message['role'] == 'user' %}" + USER + "{{ message['content'] }}\n"
    "{% else %}" + USER + "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


def build_char_tokenizer(save_dir: str | Path | None = None):
    """A character-level ``PreTrainedTokenizerFast`` with a chat template (vocab size 100).

    With ``save_dir`` it is also saved there, loadable by ``AutoTokenizer.from_pretrained``.
    """
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS)
    tokenizer.chat_template = CHAT_TEMPLATE
    if save_dir is not None:
        tokenizer.save_pretrained(str(save_dir))
    return tokenizer


def build_tiny_qwen3(save_dir: str | Path, hidden_size: int = 64, num_layers: int = 2, seed: int = 0,
                     max_positions: int = 128) -> Path:
    """Save a randomly initialised Qwen3-architecture causal LM with the character tokenizer
    to ``save_dir`` (a Hugging Face directory that ``from_pretrained`` loads offline).

    The defaults give about 0.1 M parameters (4 query / 2 key-value heads, tied embeddings):
    enough to exercise every code path of a backend in seconds on a CPU.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_char_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=3 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
        head_dim=hidden_size // 4, max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    save_dir = Path(save_dir)
    model.save_pretrained(save_dir)
    tokenizer.save_pretrained(save_dir)
    return save_dir
