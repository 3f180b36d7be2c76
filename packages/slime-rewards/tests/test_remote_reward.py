"""The `remote` reward against a real reward-model server on 127.0.0.1, run in a thread."""

import asyncio
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from slime_core import Sample, SampleStatus
from slime_core.config import Config, OptionSet
from slime_core.plugins import Plugins
from slime_core.rollout.reward_hub import RewardHub
from slime_rewards.remote import RemoteRewardError

FAST = {"rm_request_timeout": 0.3, "rm_max_retries": 2, "rm_retry_backoff": 0.01}


class RewardServer(ThreadingHTTPServer):
    """Answers each POST with the next scripted reply ``(status, body, delay_s)``; the last
    reply repeats. Records every request's arrival time and JSON body."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), ReplyHandler)
        self.replies = [(200, {"reward": 1.0}, 0.0)]
        self.requests: list[tuple[float, dict]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/score"

    def script(self, *replies) -> None:
        self.replies = [reply if isinstance(reply, tuple) and len(reply) == 3 else (*reply, 0.0) for reply in replies]

    def next_reply(self, body: dict) -> tuple:
        with self.lock:
            self.requests.append((time.perf_counter(), body))
            return self.replies[min(len(self.requests), len(self.replies)) - 1]


class ReplyHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        status, reply, delay = self.server.next_reply(body)
        time.sleep(delay)
        data = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = RewardServer()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def plugins():
    return Plugins()


def score(plugins, url, **options):
    sample = Sample(prompt="2+2?", response="4", label="4", metadata={"id": 7})
    remote = plugins.registry("reward_functions").get("remote")
    return asyncio.run(remote(sample, Config({"rm_url": url, **FAST, **options})))


def test_a_reward_field_or_a_bare_number(server, plugins):
    server.script((200, {"reward": 0.75, "details": "ok"}))
    assert score(plugins, server.url) == 0.75
    server.script((200, -2))
    assert score(plugins, server.url) == -2.0
    assert server.requests[0][1] == {"response": "4", "label": "4", "metadata": {"id": 7}, "prompt": "2+2?"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"score": 1.0}, 'expected a number or a JSON object with a numeric "reward" field'),
        ({"reward": "0.5"}, "expected a number"),
        (True, "expected a number"),
        ("NaN", "expected a number"),
        ("<html>oops</html>", "answered with non-JSON"),
    ],
)
def test_an_unusable_answer_is_an_error_naming_the_server(server, plugins, body, message):
    server.script((200, body))
    with pytest.raises(RemoteRewardError, match=message) as error:
        score(plugins, server.url)
    assert server.url in str(error.value)


def test_a_slow_answer_times_out_and_the_retry_succeeds(server, plugins):
    server.script((200, {"reward": 0.1}, 1.0), (200, {"reward": 0.9}, 0.0))
    start = time.perf_counter()
    assert score(plugins, server.url) == 0.9
    assert len(server.requests) == 2 and time.perf_counter() - start < 1.0


def test_a_server_that_stays_slow_fails_clearly_after_the_last_attempt(server, plugins):
    server.script((200, {"reward": 1.0}, 1.0))
    start = time.perf_counter()
    with pytest.raises(RemoteRewardError) as error:
        score(plugins, server.url, rm_request_timeout=0.2, rm_max_retries=1)
    message = str(error.value)
    assert f"reward server {server.url} failed after 2 attempts (last: ReadTimeout" in message
    assert "--rm-request-timeout" in message
    assert len(server.requests) == 2 and time.perf_counter() - start < 1.0


@pytest.mark.parametrize("status", [500, 502, 503, 429, 408])
def test_a_failing_server_is_retried_until_it_answers(server, plugins, status):
    server.script((status, "busy"), (status, "busy"), (200, {"reward": 0.5}))
    assert score(plugins, server.url, rm_max_retries=2) == 0.5
    assert len(server.requests) == 3


def test_retries_back_off_exponentially_then_give_up(server, plugins):
    server.script((503, "down for maintenance"))
    with pytest.raises(RemoteRewardError, match=r"failed after 4 attempts \(last: HTTP 503: down for maintenance\)"):
        score(plugins, server.url, rm_max_retries=3, rm_retry_backoff=0.1)
    arrivals = [arrival for arrival, _ in server.requests]
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
    assert len(gaps) == 3
    for gap, backoff in zip(gaps, (0.1, 0.2, 0.4)):
        assert backoff * 0.9 <= gap < backoff + 0.15, gaps


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_client_error_is_not_retried(server, plugins, status):
    server.script((status, "bad payload"))
    with pytest.raises(RemoteRewardError, match=f"rejected the request with HTTP {status}: bad payload"):
        score(plugins, server.url, rm_max_retries=3)
    assert len(server.requests) == 1


def test_an_unreachable_server_fails_after_the_retries():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/score"
    with pytest.raises(RemoteRewardError, match=r"failed after 3 attempts \(last: ConnectError"):
        score(Plugins(), url)


def test_the_url_is_required(plugins):
    with pytest.raises(ValueError, match="--rm-url"):
        score(plugins, None)


def hub_for(plugins, url, **overrides):
    options = OptionSet()
    plugins.add_options(options)
    values = {**options.defaults(), "rm_type": "remote", "rm_url": url, **FAST, "rm_timeout": 5.0, **overrides}
    return RewardHub(Config(values), plugins)


def test_through_the_hub_a_failing_remote_reward_fails_the_sample(server, plugins):
    server.script((500, "model crashed"))
    samples = [Sample(group_index=0, index=i, response=str(i), status=SampleStatus.COMPLETED) for i in range(2)]
    hub = hub_for(plugins, server.url)
    try:
        asyncio.run(hub.score_group(samples))
    finally:
        hub.close()
    for sample in samples:
        assert sample.status is SampleStatus.FAILED and sample.reward is None
        provider = r"reward function 'remote' \(plugin 'rewards', slime-rewards [^)]*\)"
        assert re.match(provider + " raised RemoteRewardError", sample.error)
        assert f"reward server {server.url} failed after 3 attempts (last: HTTP 500: model crashed)" in sample.error
    assert len(server.requests) == 6


def test_through_the_hub_a_working_remote_reward_scores_each_sample(server, plugins):
    server.script((200, {"reward": 0.25}))
    samples = [Sample(group_index=0, index=i, response=str(i), status=SampleStatus.COMPLETED) for i in range(3)]
    hub = hub_for(plugins, server.url)
    try:
        asyncio.run(hub.score_group(samples))
    finally:
        hub.close()
    assert [s.reward for s in samples] == [0.25] * 3 and all(s.status is SampleStatus.COMPLETED for s in samples)
    assert sorted(body["response"] for _, body in server.requests) == ["0", "1", "2"]
