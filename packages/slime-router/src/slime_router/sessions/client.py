"""Turning a finished session into a `Sample`, from any process that can reach the router.

    sample = session_sample(router.url, "episode-17", api_key=config.network.token)  # and forget it
    sample.reward = my_reward(sample)

``api_key``: the run's token (``config.network.token``), which a run across nodes wants on
every route (``slime_router.front``).

The tokens, loss mask and log-probs are the ones the ``sessions`` middleware recorded while the
agent ran; nothing is re-tokenised.
"""

from __future__ import annotations

import httpx

from slime_core.sample import Sample


class SessionError(RuntimeError):
    """The router could not hand out the session."""


def session_sample(
    router_url: str, session_id: str, forget: bool = True, timeout: float = 30.0, api_key: str | None = None
) -> Sample:
    """The session ``session_id`` as a `Sample`; ``forget`` (default) also deletes it from the router."""
    url = f"{router_url.rstrip('/')}/sessions/{session_id}"
    try:
        answer = httpx.request(
            "DELETE" if forget else "GET", url, timeout=timeout, trust_env=False, headers=_auth(api_key)
        )
    except httpx.HTTPError as exc:
        raise SessionError(f"the router at {router_url} did not answer {url} ({exc}); is it running?") from exc
    return _sample(answer, router_url)


async def asession_sample(
    router_url: str, session_id: str, forget: bool = True, timeout: float = 30.0, api_key: str | None = None
) -> Sample:
    """`session_sample` for async code (a rollout function)."""
    url = f"{router_url.rstrip('/')}/sessions/{session_id}"
    async with httpx.AsyncClient(timeout=timeout, trust_env=False, headers=_auth(api_key)) as client:
        try:
            answer = await client.request("DELETE" if forget else "GET", url)
        except httpx.HTTPError as exc:
            raise SessionError(f"the router at {router_url} did not answer {url} ({exc}); is it running?") from exc
    return _sample(answer, router_url)


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _sample(answer: httpx.Response, router_url: str) -> Sample:
    if answer.status_code == 404 and "no session" not in answer.text:
        raise SessionError(
            f"the router at {router_url} has no /sessions route; start it with --router-middleware sessions"
        )
    if answer.status_code != 200:
        asked = f"{answer.request.method} {answer.request.url}"
        raise SessionError(f"the router refused {asked}: {answer.status_code} {answer.text[:300]}")
    return Sample.from_dict(answer.json())
