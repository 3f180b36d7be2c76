"""`RouterTaps` on each MoE family's real transformers model: replaying the routing it recorded
changes nothing, bit for bit (the replayed weights are computed as the router computes them), and
replaying other experts changes the output."""

import pytest
import torch

from slime_core.moe_routers import RouterTaps
from slime_core.routing_replay import REPLAYED_MODEL_TYPES
from slime_core.tools.tiny_models import build_tiny_model


@pytest.mark.parametrize("family", REPLAYED_MODEL_TYPES)
def test_replaying_the_recorded_routing_is_exact_and_other_experts_change_the_output(tmp_path, family):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path, family, hidden_size=32, router_bias=0.3))
    taps, ids = RouterTaps(model.eval()), torch.randint(4, 100, (2, 7))
    with torch.no_grad(), taps.recording() as recorded:
        logits = model(ids).logits
    routes = taps.rows(recorded)  # (14, 2 layers, top 2); a dense first layer's are zeros
    dense = [layer for layer in range(2) if layer not in taps.routers]
    assert routes.shape == (14, 2, 2) and all(not routes[:, layer].any() for layer in dense)
    with torch.no_grad(), taps.replaying(routes) as own:
        assert torch.equal(model(ids).logits, logits)
    assert all(torch.equal(own[layer], routes[:, layer]) for layer in taps.routers)
    moved = routes.clone()
    moved[:, list(taps.routers)] = (moved[:, list(taps.routers)] + 1) % 4  # every token to other experts
    with torch.no_grad(), taps.replaying(moved):
        assert (model(ids).logits - logits).abs().max() > 1e-3
