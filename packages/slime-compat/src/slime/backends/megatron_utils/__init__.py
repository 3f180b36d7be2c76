"""slime.backends.megatron_utils: the Megatron helpers slime's user code imports (`cp_utils`, `loss`)."""
