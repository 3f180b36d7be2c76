"""slime.utils: the helpers slime's user code imports."""
