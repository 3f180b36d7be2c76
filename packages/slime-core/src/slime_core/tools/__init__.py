"""Tools beside the run: `slime report` and the tiny tokenizers and models for tests and laptops."""
