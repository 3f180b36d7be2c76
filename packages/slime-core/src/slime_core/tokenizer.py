"""The model's tokenizer, loaded once per process and path: the prompt checks before start-up
(`slime_core.data.checks`) and the run's rollout manager use the same object, so that the
datasets the checks tokenized are the run's (`PromptDataset.load`)."""

from __future__ import annotations

import functools


@functools.cache
def load_tokenizer(path: str):
    """The Hugging Face tokenizer saved in the model directory ``path`` (never downloaded)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)
