"""slime-rewards's plugin module, found through the ``slime`` entry-point group.

This is where the package registers reward functions (--rm-type) and sample filters.
It imports nothing heavy, so ``slime --help`` stays fast.
"""
