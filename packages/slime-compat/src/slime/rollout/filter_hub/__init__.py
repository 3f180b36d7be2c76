"""slime.rollout.filter_hub: dynamic-sampling filters."""
