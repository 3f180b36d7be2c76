"""Reference computations on Hugging Face models, which a backend's or an engine's numbers are held to."""

from __future__ import annotations


def log_probs_alone(model, tokens: list[int], response_length: int):
    """log p of the last ``response_length`` of ``tokens`` (a (response_length,) float32 tensor)
    from one forward of the Hugging Face ``model`` over that sample alone, on its device: no
    padding, packing or cache, the reference a backend's or engine's log-probs are held to."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens], device=device)).logits[0].float()
    targets = torch.tensor(tokens[len(tokens) - response_length :], device=device)
    log_probs = logits[len(tokens) - response_length - 1 : -1].log_softmax(-1)
    return log_probs.gather(-1, targets[:, None])[:, 0]
