"""`slime_core.loop.weight_sync.lora_export`: what a LoRA run's weight syncs send, by engine."""

from types import SimpleNamespace

import pytest

from slime_core.loop.weight_sync import lora_export


class _Config(dict):
    __getattr__ = dict.__getitem__


def test_lora_syncs_the_adapter_to_engines_that_merge_it_and_says_when_they_cannot():
    lora = _Config(lora_rank=8, update_weight_mode="full")
    lines: list[str] = []
    assert lora_export(lora, SimpleNamespace(loads_lora_adapters=True), "tensor", lines.append)
    assert not lora_export(lora, SimpleNamespace(loads_lora_adapters=False), "broadcast", lines.append)
    assert "send the adapter alone" in lines[0] and "warning: LoRA: these engines do not load" in lines[1]
    with pytest.raises(ValueError, match="peft adapter directory, and these engines load only full"):
        lora_export(lora, SimpleNamespace(loads_lora_adapters=False), "disk", lines.append)
    delta = _Config(lora_rank=8, update_weight_mode="delta")  # publishes the merged export
    assert not lora_export(delta, SimpleNamespace(loads_lora_adapters=False), "disk", lines.append)
    assert not lora_export(_Config(lora_rank=0), SimpleNamespace(loads_lora_adapters=True), "tensor", lines.append)
    assert len(lines) == 3
