"""The ``metrics`` middleware: latency, queueing, tokens and errors of generation requests.

Per route (``/generate``, ``/v1/chat/completions``, ``/v1/completions``; other requests pass
unmeasured):

- latency: seconds from the request entering this middleware to its answer;
- queueing: seconds the engine kept the request waiting before running it, as SGLang reports
  it (``meta_info.queue_time``); engines that do not report it (the CPU engine) add none;
- prompt and completion tokens, from ``meta_info`` (``/generate``) or ``usage`` (OpenAI routes);
- errors: answers with status >= 400, as ``client`` (4xx) or ``server`` (5xx);
- requests in flight.

``GET /metrics`` serves them in Prometheus' text format (cumulative); ``GET /metrics/summary``
serves a JSON summary of the requests since the last ``?reset=1`` (what ``Router.metrics()``
returns for the run's log: counts, tokens, p50/p99/mean latency and queueing). Place it
first in ``--router-middleware`` to measure what clients see.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from slime_router.handlers import Handler, Request, Response

if TYPE_CHECKING:
    from slime_core.config import Config

ROUTES = ("/generate", "/v1/chat/completions", "/v1/completions")
BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, float("inf"))
WINDOW = 100_000  # summaries cover at most the latest this many requests


def metrics_middleware(next_handler: Handler, config: Config) -> Handler:
    collected = Collected()

    async def metrics(request: Request) -> Response:
        if request.method == "GET" and request.path == "/metrics":
            return Response(200, collected.prometheus().encode(), {"content-type": "text/plain; version=0.0.4"})
        if request.method == "GET" and request.path == "/metrics/summary":
            return Response.json(collected.summary(reset="reset=1" in request.query))
        if request.path not in ROUTES:
            return await next_handler(request)
        return await collected.measure(next_handler, request)

    return metrics


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS_S))  # per bucket, not cumulative
    total: float = 0.0
    count: int = 0

    def add(self, value: float) -> None:
        self.counts[next(i for i, bound in enumerate(BUCKETS_S) if value <= bound)] += 1
        self.total += value
        self.count += 1


@dataclass
class Window:
    """The requests since the last summary reset."""

    latencies: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    queues: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Collected:
    """Cumulative counters and histograms (for Prometheus) and the current summary window."""

    def __init__(self):
        self.requests: dict[tuple[str, int], int] = defaultdict(int)  # (route, status) -> count
        self.errors: dict[tuple[str, str], int] = defaultdict(int)  # (route, "client" | "server") -> count
        self.tokens: dict[tuple[str, str], int] = defaultdict(int)  # (route, "prompt" | "completion") -> count
        self.latency: dict[str, Histogram] = defaultdict(Histogram)
        self.queue: dict[str, Histogram] = defaultdict(Histogram)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.window = Window()

    async def measure(self, next_handler: Handler, request: Request) -> Response:
        route = request.path
        self.in_flight[route] += 1
        start = time.perf_counter()
        try:
            response = await next_handler(request)
        except Exception:
            self.observe(route, 500, time.perf_counter() - start, None)
            raise
        finally:
            self.in_flight[route] -= 1
        self.observe(route, response.status, time.perf_counter() - start, response)
        return response

    def observe(self, route: str, status: int, seconds: float, response: Response | None) -> None:
        self.requests[route, status] += 1
        self.latency[route].add(seconds)
        self.window.requests += 1
        self.window.latencies.append(seconds)
        if status >= 400:
            self.errors[route, "client" if status < 500 else "server"] += 1
            self.window.errors += 1
        if response is not None and status == 200:
            self._observe_usage(route, response)

    def _observe_usage(self, route: str, response: Response) -> None:
        prompt, completion, queue = usage(response.data())
        self.tokens[route, "prompt"] += prompt
        self.tokens[route, "completion"] += completion
        self.window.prompt_tokens += prompt
        self.window.completion_tokens += completion
        if queue is not None:
            self.queue[route].add(queue)
            self.window.queues.append(queue)

    def summary(self, reset: bool) -> dict[str, float]:
        window = self.window
        out = {
            "router/requests": window.requests,
            "router/errors": window.errors,
            "router/prompt_tokens": window.prompt_tokens,
            "router/completion_tokens": window.completion_tokens,
            "router/in_flight": sum(self.in_flight.values()),
        }
        for name, values in (("latency", window.latencies), ("queue", window.queues)):
            if values:
                out[f"router/{name}_p50_s"] = _percentile(values, 0.5)
                out[f"router/{name}_p99_s"] = _percentile(values, 0.99)
                out[f"router/{name}_mean_s"] = statistics.fmean(values)
        if reset:
            self.window = Window()
        return out

    def prometheus(self) -> str:
        def labels(name: str, counts: dict) -> dict[str, int]:  # {(route, value): n} -> {'route="..",name=".."': n}
            return {f'route="{route}",{name}="{value}"': n for (route, value), n in counts.items()}

        lines = _counter(
            "slime_router_requests_total", "Requests answered, by route and status code.", labels("code", self.requests)
        )
        lines += _counter(
            "slime_router_errors_total",
            "Answers with status >= 400 (client: 4xx, server: 5xx).",
            labels("kind", self.errors),
        )
        lines += _counter(
            "slime_router_tokens_total",
            "Prompt and completion tokens of answered requests.",
            labels("kind", self.tokens),
        )
        lines += ["# HELP slime_router_in_flight Requests being answered now.", "# TYPE slime_router_in_flight gauge"]
        lines += [f'slime_router_in_flight{{route="{route}"}} {n}' for route, n in self.in_flight.items()]
        lines += _histogram(
            "slime_router_latency_seconds", "Seconds from entering the metrics middleware to the answer.", self.latency
        )
        lines += _histogram(
            "slime_router_queue_seconds", "Seconds the engine kept a request waiting (queue_time).", self.queue
        )
        return "\n".join(lines) + "\n"


def usage(data) -> tuple[int, int, float | None]:
    """(prompt tokens, completion tokens, engine queueing seconds or None) of an answer's JSON;
    for the list that answers a ``/generate`` for n samples (``sampling_params.n``), the
    sums over the samples and their longest queueing."""
    if isinstance(data, list):
        each = [usage(item) for item in data]
        queues = [queue for _, _, queue in each if queue is not None]
        return sum(p for p, _, _ in each), sum(c for _, c, _ in each), max(queues) if queues else None
    if not isinstance(data, dict):
        return 0, 0, None
    if isinstance(data.get("usage"), dict):
        return int(data["usage"].get("prompt_tokens", 0)), int(data["usage"].get("completion_tokens", 0)), None
    meta = data.get("meta_info")
    if not isinstance(meta, dict):
        return 0, 0, None
    queue = meta.get("queue_time")
    return (
        int(meta.get("prompt_tokens", 0)),
        int(meta.get("completion_tokens", 0)),
        None if queue is None else float(queue),
    )


def _percentile(values, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _counter(name: str, help_text: str, samples: dict[str, int]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
    return lines + [f"{name}{{{labels}}} {n}" for labels, n in samples.items()]


def _histogram(name: str, help_text: str, histograms: dict[str, Histogram]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for route, histogram in histograms.items():
        running = 0
        for bound, count in zip(BUCKETS_S, histogram.counts):
            running += count
            le = "+Inf" if bound == float("inf") else bound
            lines.append(f'{name}_bucket{{route="{route}",le="{le}"}} {running}')
        lines += [
            f'{name}_sum{{route="{route}"}} {histogram.total}',
            f'{name}_count{{route="{route}"}} {histogram.count}',
        ]
    return lines
