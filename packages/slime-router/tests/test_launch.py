"""start_router with the real sglang-router and CPU engines: spread, affinity, worker API,
loopback-only listening, an existing router, and start-up failures."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from slime_router.launch import start_router

pytestmark = pytest.mark.integration
ONE_TOKEN = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 1}}


def test_load_is_spread_over_both_engines(router, engines, served):
    before = served(engines)
    answers = [httpx.post(f"{router.url}/generate", json=ONE_TOKEN, timeout=60) for _ in range(16)]
    spread = [after - first for after, first in zip(served(engines), before)]
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    assert sum(spread) == 16 and min(spread) >= 1, spread


def test_requests_of_one_session_go_to_one_engine(router, engines, served):
    for session in ("alpha", "beta", "gamma", "delta"):
        before = served(engines)
        for _ in range(4):
            answer = httpx.post(f"{router.url}/generate", json=ONE_TOKEN, headers={"X-Session-Id": session}, timeout=60)
            assert answer.status_code == 200, answer.text
        spread = sorted(after - first for after, first in zip(served(engines), before))
        assert spread == [0, 4], (session, spread)


def test_workers_are_removed_and_added_through_the_worker_api(router, engines, served):
    assert router.workers() == sorted(engines)
    router.remove_worker(engines[1])
    try:
        assert router.workers() == [engines[0]]
        before = served(engines)
        for _ in range(4):
            assert httpx.post(f"{router.url}/generate", json=ONE_TOKEN, timeout=60).status_code == 200
        assert [after - first for after, first in zip(served(engines), before)] == [4, 0]
        router.remove_worker(engines[1])  # not listed: nothing to do
    finally:
        router.add_worker(engines[1])
    assert router.workers() == sorted(engines)


def test_nothing_listens_beyond_the_loopback(router):
    pids = [process.pid for process in router.processes]
    assert len(pids) == 2  # the front and sglang-router
    listening = [address for pid in pids for address in _listening_addresses(pid)]
    assert len(listening) >= 3, listening  # the front, the router, the router's Prometheus exporter
    assert all(host in ("127.0.0.1", "::1") for host, _ in listening), listening


def test_the_run_token_guards_the_router_and_stays_out_of_the_run_directory(
    engines, make_run_config, test_plugins, tmp_path
):
    """A run across nodes: sglang-router and the front refuse generation without the token, the
    ``sessions`` middleware's own ``/generate`` carries it, the front's middlewares have it (by
    environment) although no file in the run directory (the front's pickled config included)
    and no process's command line does. The token starts with ``-``, as a random one may."""
    import hashlib
    import pickle
    import secrets

    from slime_core.cluster.network import Network
    from slime_core.testing import files_holding, processes_running

    token = "-" + secrets.token_urlsafe(24)
    config = make_run_config(router_middleware=["tag", "sessions"], output_dir=str(tmp_path))
    config = config.replace(network=Network(spans_nodes=True, token=token))  # as the driver makes the run's
    keyed = {"Authorization": f"Bearer {token}"}
    completion = {"prompt": "1+1=", "max_tokens": 2, "session_id": "agent-1"}
    with start_router(config, engines[:1], test_plugins) as router:
        refused = [httpx.post(f"{url}/generate", json=ONE_TOKEN, timeout=60) for url in (router.url, router.router_url)]
        answered = httpx.post(f"{router.url}/generate", json=ONE_TOKEN, headers=keyed, timeout=60)
        agent = httpx.post(f"{router.url}/v1/completions", json=completion, headers=keyed, timeout=60)
        on_command_lines = processes_running(token)
    assert [answer.status_code for answer in refused] == [401, 401], [answer.text for answer in refused]
    assert answered.status_code == 200, answered.text
    assert agent.status_code == 200, agent.text  # the sessions middleware's /generate had the token
    assert answered.headers["x-test-token-sha256"] == hashlib.sha256(token.encode()).hexdigest()
    pickled = tmp_path / "router" / "front-config.pkl"
    assert pickle.loads(pickled.read_bytes()).network == Network(spans_nodes=True, token=None)
    assert files_holding(tmp_path, token) == []
    assert on_command_lines == []


def test_a_run_on_one_node_guards_the_control_routes_and_leaves_generation_open(
    engines, make_run_config, test_plugins, tmp_path
):
    """Every run has a token: on one node it is the admin key of sglang-router's control plane
    and of the front (adding or removing engines without it: 401), while generation needs none."""
    from slime_core.cluster.network import Network

    config = make_run_config(router_middleware=["tag"], output_dir=str(tmp_path))
    config = config.replace(network=Network.for_nodes(1))
    with start_router(config, engines[:1], test_plugins) as router:
        urls = (router.router_url, router.url)
        add = [httpx.post(f"{url}/workers", json={"url": engines[1]}, timeout=60) for url in urls]
        remove = httpx.delete(f"{router.url}/workers/x", timeout=60)
        generated = [httpx.post(f"{url}/generate", json=ONE_TOKEN, timeout=60) for url in urls]
        listed = router.workers()  # the run's own call carries the token
    assert [answer.status_code for answer in add + [remove]] == [401, 401, 401], [a.text for a in add + [remove]]
    assert [answer.status_code for answer in generated] == [200, 200]
    assert listed == [engines[0]]


def test_an_existing_router_is_used_and_left_running(router, engines, make_run_config, tmp_path):
    host, port = router.router_url.removeprefix("http://").split(":")
    reuse = start_router(
        make_run_config(sglang_router_ip=host, sglang_router_port=port, output_dir=str(tmp_path)), engines
    )
    reuse.stop()
    assert reuse.url == reuse.router_url == router.router_url and reuse.workers() == sorted(engines)
    assert httpx.get(f"{router.router_url}/health", timeout=5).status_code == 200


def test_a_router_that_cannot_start_says_why(make_run_config, tmp_path):
    from slime_router.servers import RouterError

    with pytest.raises(
        RouterError,
        match=r"sglang-router exited with code 2 before it was ready:\n"
        r".*--policy: invalid choice: 'fastest'.*\ncheck the --router-\* options",
    ):
        start_router(make_run_config(router_policy="fastest", output_dir=str(tmp_path)), ["http://127.0.0.1:9"])


def test_an_unknown_middleware_fails_before_anything_starts(make_run_config, tmp_path):
    from slime_core.plugins import RegistryError

    with pytest.raises(RegistryError, match="unknown router middleware 'session'; did you mean 'sessions'"):
        start_router(make_run_config(router_middleware=["session"], output_dir=str(tmp_path)), ["http://127.0.0.1:9"])
    assert not (tmp_path / "router").exists()


def _listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(host, port) of every TCP socket process ``pid`` listens on, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = str(fd.readlink()) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table, family in (("tcp", 4), ("tcp6", 6)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(_address(fields[1], family))
    return found


def _address(hex_address: str, family: int) -> tuple[str, int]:
    import ipaddress

    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    # /proc prints the address as 32-bit words in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if family == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def test_a_front_that_cannot_start_says_why(engines, make_run_config, tmp_path):
    from slime_router.servers import RouterError

    config = make_run_config(
        router_middleware=["sessions"], hf_checkpoint=str(tmp_path / "no-model"), output_dir=str(tmp_path)
    )
    children = _children()
    with pytest.raises(
        RouterError,
        match=r"(?s)middleware front exited with code 1 before it was ready:\n.*no-model.*"
        r"\nsee front.log: a middleware failed to start",
    ):
        start_router(config, engines)
    assert _children() == children  # the sglang-router it had started is stopped too


def _children() -> set[int]:
    """Process ids of this process's running children."""
    import os

    return set(map(int, Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()))
