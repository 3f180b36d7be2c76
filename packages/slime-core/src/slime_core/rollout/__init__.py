"""The default rollout: generate, reward, filter; what rollout and generate functions are handed and return."""
