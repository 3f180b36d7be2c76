"""``slime convert``: Hugging Face ⇄ Megatron checkpoints on disk (``command`` parses the
command line and stays light; ``run`` does the work)."""
