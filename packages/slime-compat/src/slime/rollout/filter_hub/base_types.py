"""slime.rollout.filter_hub.base_types: a dynamic-sampling filter's verdict."""

from slime_compat.outputs import DynamicFilterOutput, call_dynamic_filter, should_drop_dynamic_filter_output

__all__ = ["DynamicFilterOutput", "call_dynamic_filter", "should_drop_dynamic_filter_output"]
