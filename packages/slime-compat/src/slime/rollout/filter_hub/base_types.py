"""slime.rollout.filter_hub.base_types: a dynamic-sampling filter's verdict."""

from slime_compat.outputs import DynamicFilterOutput, call_dynamic_filter

__all__ = ["DynamicFilterOutput", "call_dynamic_filter"]
