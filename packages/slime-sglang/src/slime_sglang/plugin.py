"""slime-sglang's plugin module, found through the ``slime`` entry-point group.

This is where the package registers rollout engines (SGLang servers and the CPU engine) and the default rollout function.
It imports nothing heavy, so ``slime --help`` stays fast.
"""
