"""The front answering bad requests, and the metrics middleware's figures."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.integration
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        (CHAT, b'{"messages": [', 400, "is not valid JSON"),
        (CHAT, b"[1, 2]", 400, "must be a JSON object, got list"),
        (CHAT, {"model": "m"}, 400, "messages must be a non-empty list"),
        (CHAT, {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role must be one of"),
        (
            CHAT,
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            400,
            "only text parts are supported",
        ),
        (CHAT, {"messages": HI, "n": 2}, 400, "n must be 1"),
        (CHAT, {"messages": HI, "logit_bias": {"5": 1}}, 400, "does not support 'logit_bias'"),
        (CHAT, {"messages": HI, "temperature": "hot"}, 422, "temperature: invalid type"),  # sglang-router checks types
        (CHAT, {"messages": HI, "session_id": "a/b"}, 400, "without '/'"),
        ("/v1/completions", {"prompt": ""}, 400, "prompt must be a non-empty string"),
        ("/generate", {"input_ids": [5, 100000]}, 400, "outside the vocabulary"),
        ("/sessions/nobody", None, 404, "no session 'nobody'"),
    ],
)
def test_a_bad_request_gets_a_4xx_that_says_why(router, path, body, status, message):
    if body is None:
        answer = httpx.get(f"{router.url}{path}", timeout=30)
    else:
        content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
        answer = httpx.post(
            f"{router.url}{path}", content=content, headers={"content-type": "application/json"}, timeout=30
        )
    assert answer.status_code == status, answer.text
    assert message in answer.text
    # the front is still there
    assert httpx.post(f"{router.url}{CHAT}", json={"messages": HI, "max_tokens": 2}, timeout=60).status_code == 200


def test_metrics_count_latency_tokens_and_errors(router):
    router.metrics(reset=True)
    bodies = [{"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": n, "ignore_eos": True}} for n in (1, 2, 3)]
    for body in bodies:
        assert httpx.post(f"{router.url}/generate", json=body, timeout=60).status_code == 200
    assert (
        httpx.post(
            f"{router.url}{CHAT}", json={"messages": HI, "max_tokens": 4, "ignore_eos": True}, timeout=60
        ).status_code
        == 200
    )
    assert httpx.post(f"{router.url}/generate", json={"input_ids": []}, timeout=60).status_code == 400
    group = {
        "input_ids": [5, 6],
        "sampling_params": {"max_new_tokens": 2, "ignore_eos": True, "n": 3},
    }  # one list answer
    assert len(httpx.post(f"{router.url}/generate", json=group, timeout=60).json()) == 3
    summary = router.metrics()
    assert summary["router/requests"] == 6 and summary["router/errors"] == 1
    assert (
        summary["router/prompt_tokens"] == 3 * 3 + 5 + 3 * 2
    )  # the chat's prompt is "<|user|>", "H", "i", "\n", "<|assistant|>"
    assert summary["router/completion_tokens"] == 1 + 2 + 3 + 4 + 3 * 2
    assert 0 < summary["router/latency_p50_s"] <= summary["router/latency_p99_s"] < 30
    assert router.metrics()["router/requests"] == 0  # reset by the previous call
    text = httpx.get(f"{router.url}/metrics", timeout=10).text
    assert 'slime_router_requests_total{route="/generate",code="400"}' in text
    assert 'slime_router_errors_total{route="/generate",kind="client"}' in text
    assert 'slime_router_latency_seconds_bucket{route="/v1/chat/completions",le="+Inf"}' in text
    assert "# TYPE slime_router_tokens_total counter" in text
