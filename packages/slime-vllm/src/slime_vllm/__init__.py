"""slime-vllm: see the package README.

Two of its modules run inside vLLM's own interpreter, where slime is not installed:
`slime_vllm.serve` (the server's entry point) and `slime_vllm.worker_extension` (loaded by
vLLM's workers); they import nothing of slime's.
"""

__version__ = "0.1.0"
