"""slime-fsdp's plugin module, found through the ``slime`` entry-point group.

This is where the package registers the FSDP2 train backend (--train-backend fsdp) and its options.
It imports nothing heavy, so ``slime --help`` stays fast.
"""
