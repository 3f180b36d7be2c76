"""slime.utils.mask_utils: loss-mask helpers (slime's chat-template-specific
``MultiTurnLossMaskGenerator`` is not provided)."""


def get_response_lengths(loss_masks: list[list[int]]) -> list[int]:
    """Response length of each loss mask: from its first 1 to its end (0 for a mask of zeros)."""
    return [len(mask) - mask.index(1) if 1 in mask else 0 for mask in loss_masks]
