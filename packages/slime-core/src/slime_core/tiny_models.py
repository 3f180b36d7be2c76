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
