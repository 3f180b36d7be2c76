"""Continuous batching on one thread, off the HTTP event loop.

Each step of the scheduler thread either prefills the requests waiting for a place (up to
``max_running_requests`` in all) and merges them into the running batch, or, when none
wait, runs ONE batched decode step for every running request. After each step, finished
requests answer and leave the batch at once, without waiting for the longest.

Everything else (abort, pause, weight updates, memory release) is a function run *between*
steps (:meth:`Scheduler.call`), so it sees a consistent batch and weights never change in
the middle of a forward. A request generated across a weight update reports the version
in force when it finished.

``/health`` is answered by a no-op call, so it reflects the scheduler's progress: a step that
never ends leaves it unanswered (a health check's timeout then counts the engine as hung),
a dead scheduler thread is reported (`alive`), and so is an engine whose every step fails
(`failed_steps`, e.g. weights gone non-finite), with its error. To test that, ``SLIME_CPU_ENGINE_HANG_FILE``
names a file: once it exists, the scheduler deletes it and its next step never ends (a hung
forward, while the HTTP side still answers). Tests only; unset, it costs nothing.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext

import torch

from slime_sglang.cpu_engine import batch as batching
from slime_sglang.cpu_engine.request import GenerateRequest, answer
from slime_sglang.cpu_engine.routing import EngineRouting
from slime_sglang.cpu_engine.sampling import sample_tokens
from slime_sglang.cpu_engine.stopping import StopChecker

log = logging.getLogger(__name__)
#: Tests only: the file whose appearance hangs the scheduler (see the module docstring).
HANG_FILE_ENV = "SLIME_CPU_ENGINE_HANG_FILE"


class Scheduler:
    """Owns the model while it generates. Submit requests and calls from any thread."""

    def __init__(
        self,
        model,
        stop_checker: StopChecker,
        max_running_requests: int,
        weight_version: str = "default",
        routing: EngineRouting | None = None,
    ):
        self.model = model
        self.routing = routing  # a MoE model's routing taps, for requests that ask for their routed experts
        self.stop_checker = stop_checker
        self.max_running_requests = max_running_requests
        self.weight_version = weight_version  # changed only between steps
        self.paused = False  # no decoding or prefilling while paused
        self.held: set[str] = set()  # reasons besides pause to stand still (released weights)
        self.finished_requests = 0
        self.failed_steps = 0  # generation steps that failed in a row (each fails its requests)
        self.last_error: str | None = None  # the error of the last of them
        self.generated_tokens = 0
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._waiting: deque[GenerateRequest] = deque()
        self._batch: batching.RunningBatch | None = None
        self._thread = threading.Thread(target=self._run, name="cpu-engine-scheduler", daemon=True)
        self._hang_file = os.environ.get(HANG_FILE_ENV)  # tests: see the module docstring

    # -- any thread ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, request: GenerateRequest) -> None:
        """Queue a request; its ``on_done`` gets the answer, on the scheduler thread."""
        self._inbox.put(request)

    def call(self, fn: Callable[[], object]) -> concurrent.futures.Future:
        """Run ``fn()`` on the scheduler thread between two steps; the future holds its result."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._inbox.put((fn, future))
        return future

    @property
    def alive(self) -> bool:
        """Whether the scheduler thread runs (it ends only on a bug, which its log shows)."""
        return self._thread.is_alive()

    @property
    def running_requests(self) -> int:
        batch = self._batch
        return len(batch.requests) if batch else 0

    @property
    def waiting_requests(self) -> int:
        return len(self._waiting)

    # -- scheduler thread (also what `call` functions may use) ------------------------------
    def abort(self, rid: str | None, message: str) -> int:
        """Finish the request ``rid`` (every request when None) with reason abort; returns how many."""
        doomed = [r for r in self._requests() if rid is None or r.rid == rid]
        for request in doomed:
            request.abort(message)
        self._retire(doomed)
        return len(doomed)

    def _requests(self) -> list[GenerateRequest]:
        return list(self._waiting) + (self._batch.requests if self._batch else [])

    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                self._take_inbox(block=not self._can_step())
                if self._can_step():
                    self._step_or_fail()

    def _can_step(self) -> bool:
        return not self.paused and not self.held and bool(self._waiting or self._batch)

    def _take_inbox(self, block: bool) -> None:
        item = self._inbox.get() if block else None
        while True:
            if item is None:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    return
            self._handle(item)
            item = None

    def _handle(self, item) -> None:
        if isinstance(item, GenerateRequest):
            self._waiting.append(item)
            return
        fn, future = item
        if not future.set_running_or_notify_cancel():
            return  # its caller went away (e.g. a health check that timed out)
        try:
            future.set_result(fn())
        except Exception as exc:  # the caller (an HTTP handler) reports it
            future.set_exception(exc)

    def _step_or_fail(self) -> None:
        try:
            self._step()
            self.failed_steps, self.last_error = 0, None
        except Exception as exc:  # a failed forward fails its requests, not the engine
            log.exception("generation step failed")
            self.failed_steps, self.last_error = self.failed_steps + 1, f"{type(exc).__name__}: {exc}"
            failed = self._requests()
            self._waiting.clear()
            self._batch = None
            for request in failed:
                request.on_done(exc)

    def _step(self) -> None:
        if self._hang_file and os.path.exists(self._hang_file):
            os.remove(self._hang_file)
            log.warning("%s exists: this step never ends (a hung scheduler, for tests)", self._hang_file)
            threading.Event().wait()
        admitted = self._admit()
        if admitted:
            try:
                with self.routing.prefill(admitted) if self.routing else nullcontext():
                    joining, logits = batching.prefill(self.model, admitted)
                self._append_tokens(admitted, logits)
            except Exception:
                self._waiting.extend(admitted)  # neither waiting nor batched now: make the failure reach them
                raise
            self._batch = joining if self._batch is None else batching.merge(self._batch, joining)
        elif self._batch is not None:
            with self.routing.decode(self._batch.requests) if self.routing else nullcontext():
                logits = batching.decode(self.model, self._batch)
            self._append_tokens(self._batch.requests, logits)
        self._retire([r for r in self._requests() if r.finish_reason is not None])

    def _admit(self) -> list[GenerateRequest]:
        """Waiting requests that fit in the running batch, oldest first."""
        room = min(self.max_running_requests - self.running_requests, len(self._waiting))
        return [self._waiting.popleft() for _ in range(room)]

    def _append_tokens(self, requests: list[GenerateRequest], logits: torch.Tensor) -> None:
        logits = self.stop_checker.hold_back(logits, requests)
        tokens, log_probs, nuclei = sample_tokens(logits, [r.params for r in requests], [r.generator for r in requests])
        for request, token, log_prob, nucleus in zip(requests, tokens.tolist(), log_probs.tolist(), nuclei):
            request.output_ids.append(token)
            request.output_logprobs.append(log_prob)
            if nucleus is not None:
                request.output_nuclei.append(nucleus)
            request.finish_reason = self.stop_checker.finish_reason(request)
        self.generated_tokens += len(requests)

    def _retire(self, finished: list[GenerateRequest]) -> None:
        """Answer the finished requests and drop their rows from the batch."""
        if not finished:
            return
        self._waiting = deque(r for r in self._waiting if r.finish_reason is None)
        if self._batch is not None:
            rows = [i for i, r in enumerate(self._batch.requests) if r.finish_reason is None]
            self._batch = batching.keep(self._batch, rows)
        checker = self.stop_checker
        for request in finished:
            self.finished_requests += 1
            request.on_done(answer(request, checker.text(request), self.weight_version, checker.token_texts(request)))
