"""slime-megatron's plugin module, found through the ``slime`` entry-point group.

This is where the package registers the Megatron-core train backend (--train-backend megatron) and its options.
It imports nothing heavy, so ``slime --help`` stays fast.
"""
