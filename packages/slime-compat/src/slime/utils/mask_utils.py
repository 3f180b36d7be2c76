"""slime.utils.mask_utils: loss-mask helpers (see `slime_compat.loss_mask`)."""

from slime_compat.loss_mask import MultiTurnLossMaskGenerator, get_response_lengths

__all__ = ["MultiTurnLossMaskGenerator", "get_response_lengths"]
