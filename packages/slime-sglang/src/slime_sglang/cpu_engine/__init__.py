"""The CPU engine: a transformers model served with SGLang's native HTTP API.

It lets a laptop or CI run the whole framework without a GPU through the same client,
router and weight-update code as a real SGLang server. Start it with
``slime engine serve --model DIR --port N``. Modules:

- ``request``: the ``/generate`` body, a request's state, its answer
- ``sampling``: temperature / top-p / top-k / seeded draws and log-probs
- ``stopping``: finish reasons and the answered text
- ``batch``: the running batch and its left-padded per-request caches
- ``layer_cache``: one layer's cache by kind (attention columns, DSA indexer keys, linear-attention state)
- ``scheduler``: continuous batching on a thread of its own
- ``weights``: loading, updates, memory release
- ``engine``, ``control``, ``server``: the HTTP side
- ``weight_groups``: weight updates by broadcast (SGLang's ``update_weights_from_distributed``)
- ``serve_command``: ``slime engine serve``; ``launch``: start one in a subprocess
"""
