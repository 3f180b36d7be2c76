"""slime-router's plugin module, found through the ``slime`` entry-point group.

This is where the package registers the router and its middlewares (--router-middleware).
It imports nothing heavy, so ``slime --help`` stays fast.
"""
