"""slime.rollout: the rollout building blocks slime's user code imports."""
