"""Token-exact sessions for agents that speak OpenAI's API (the ``sessions`` middleware).

``middleware``: the routes; ``openai_api``: requests and answers; ``chat_template``: turns
without re-tokenising; ``trajectory``: what a session records; ``tool_calls``: Hermes-style
calls in the output; ``client``: a finished session as a `Sample`.
"""
