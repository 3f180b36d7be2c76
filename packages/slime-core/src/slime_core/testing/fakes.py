"""Fake train and rollout backends and a fake router, registered through the public hooks,
for testing the real driver (`slime_core.loop`) in seconds, in one process, without Ray.

The model is one number: θ, the logit of "the next token is a digit". An engine samples each
response token from that Bernoulli policy (a digit or a letter, seeded by the request's
sampling seed, so runs repeat exactly), the ``digit_share`` reward pays for digits, and the
train rank does REINFORCE with group-relative advantages on θ. So a run learns, its weights
travel from the rank to the engines through the weight-update contract, and every part
records what it was asked to do (`Recorder`), which the tests read.

Register `FakeBackendsPlugin` and run with ``--actor-runtime inprocess --train-backend fake
--rollout-backend fake --router fake`` (`slime_core.testing.driver.run_on_fakes` does both; the
``fake_run`` fixture on top of it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core import hookimpl
from slime_core.checkpoint.directory import prepare, publish, resume_checkpoint, staging
from slime_core.engine import EngineUnavailable, GenerateResult
from slime_core.rank.weight_bucket import WeightBucket

if TYPE_CHECKING:
    from slime_core.config.config import Config

DIGITS = "0123456789"
LETTERS = "abcdefghij"


class Recorder:
    """What every fake part was asked to do during the current test (reset per test)."""

    calls: Counter = Counter()  # "engine.pause", "router.add_worker", "rank.train", ...
    engines: dict[str, FakeEngine] = {}  # url -> engine, live or dead
    routers: dict[str, FakeRouter] = {}
    ranks: list[FakeTrainRank] = []

    @classmethod
    def reset(cls) -> None:
        cls.calls, cls.engines, cls.routers, cls.ranks = Counter(), {}, {}, []


def _char_ids(tokenizer, chars: str) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(ch) for ch in chars]


def _tokenizer(config: Config):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(config.hf_checkpoint, local_files_only=True)


def log_p(theta: float, is_digit: bool) -> float:
    """log π(token) of the Bernoulli policy with logit θ."""
    return -math.log1p(math.exp(-theta if is_digit else theta))


# ------------------------------------------------------------------ train backend


class FakeTrainRank:
    """A `slime_core.train_backend.TrainRank` whose model is θ."""

    def __init__(self, config: Config, rank, world_size, master_addr, master_port):
        self.config, self.theta, self.version = config, 0.0, 0
        self.digits = set(_char_ids(_tokenizer(config), DIGITS))
        self.resident = True
        Recorder.ranks.append(self)

    def init(self) -> dict:
        Recorder.calls["rank.init"] += 1
        checkpoint = resume_checkpoint(self.config)
        if checkpoint is None:
            return {"rollout_id": 0, "weight_version": 0}
        state = json.loads((checkpoint / "fake.json").read_text())
        self.theta, self.version = state["theta"], state["version"]
        return {"rollout_id": state["rollout_id"] + 1, "weight_version": self.version}

    def compute_log_probs(self, batch, model: str = "actor") -> list[list[float]]:
        Recorder.calls["rank.compute_log_probs"] += 1
        return [
            [log_p(self.theta, t in self.digits) for t in tokens[len(tokens) - n :]]
            for tokens, n in zip(batch.tokens, batch.response_lengths)
        ]

    def start_train(self, rollout_id: int, batch) -> int:
        """Group-relative advantages (reward − group mean) of the share; its steps: contiguous slices."""
        from slime_core.rank.micro_batches import step_slices

        assert self.resident, "trained while offloaded"
        Recorder.calls["rank.train"] += 1
        means = {
            g: sum(r for r, h in zip(batch.rewards, batch.group_ids) if h == g) / batch.group_ids.count(g)
            for g in set(batch.group_ids)
        }
        self.batch, self.history = batch, []
        self.advantages = [reward - means[group] for reward, group in zip(batch.rewards, batch.group_ids)]
        self.slices = step_slices(len(batch), self.config.num_steps_per_rollout)
        return len(self.slices)

    def train_step(self, step: int) -> dict[str, float]:
        """One REINFORCE step on θ over the step's samples: advantage × d log π / dθ per token."""
        time.sleep(self.config.get("fake_train_seconds") or 0.0)  # long enough for async overlap to show
        batch, p, grad = self.batch, 1.0 / (1.0 + math.exp(-self.theta)), 0.0
        for i in self.slices[step]:
            tokens, n = batch.tokens[i], batch.response_lengths[i]
            grad += self.advantages[i] * sum(
                ((t in self.digits) - p) * m for t, m in zip(tokens[len(tokens) - n :], batch.loss_masks[i])
            )
        self.theta += self.config.lr * grad / max(len(self.slices[step]), 1)
        metrics = {
            "loss": -grad / max(len(self.slices[step]), 1),
            "theta": self.theta,
            "samples": float(len(self.slices[step])),
            "trained_tokens": float(sum(sum(batch.loss_masks[i]) for i in self.slices[step])),
        }
        self.history.append(metrics)
        return metrics

    def finish_train(self) -> dict[str, float]:
        self.version += 1
        last = self.history[-1]
        return {
            **last,
            "samples": sum(m["samples"] for m in self.history),
            "trained_tokens": sum(m["trained_tokens"] for m in self.history),
        }

    def weight_buckets(self, bucket_bytes: int) -> int:
        return 1

    def export_bucket(self, index: int) -> WeightBucket:
        import torch

        return WeightBucket.pack([("theta", torch.tensor([self.theta], dtype=torch.float64))])

    def weight_version(self) -> int:
        return self.version

    def nonfinite_weights(self) -> list[str]:
        return [] if math.isfinite(self.theta) else ["theta"]

    def save(self, rollout_id: int) -> str:
        Recorder.calls["rank.save"] += 1
        final, tmp = staging(self.config.save, rollout_id)
        prepare(tmp)
        (tmp / "fake.json").write_text(
            json.dumps({"theta": self.theta, "version": self.version, "rollout_id": rollout_id})
        )
        publish(tmp, final, rollout_id)
        return str(final)

    def save_hf(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "theta.json").write_text(json.dumps({"theta": self.theta}))

    def offload(self) -> None:
        Recorder.calls["rank.offload"] += 1
        self.resident = False

    def onload(self) -> None:
        Recorder.calls["rank.onload"] += 1
        self.resident = True


# ------------------------------------------------------------------ rollout backend


class FakeEngine:
    """One engine: θ, a weight version, and the calls that reach it."""

    def __init__(self, url: str, tokenizer):
        self.url, self.theta, self.version = url, 0.0, "default"
        self.digits, self.letters = _char_ids(tokenizer, DIGITS), _char_ids(tokenizer, LETTERS)
        self.decode = tokenizer.decode
        self.alive, self.resident, self.requests = True, True, 0
        self.stopped = False  # by the backend's shutdown at the end of the run
        self.running = asyncio.Event()
        self.running.set()  # cleared while paused
        Recorder.engines[url] = self

    async def generate(self, sampling, n: int) -> list[GenerateResult]:
        """``n`` responses; each token is awaited, so a pause, an abort or a death lands mid-response."""
        self.requests += 1
        results = []
        for copy in range(n):
            seed = (sampling.sampling_seed or 0) + copy * 0x9E3779B1
            rng, ids, logps = random.Random(seed), [], []
            for _ in range(sampling.max_new_tokens):
                await self.running.wait()
                await asyncio.sleep(0)
                if not self.alive:
                    raise EngineUnavailable(f"fake engine {self.url} died mid-request")
                assert self.resident, "generated while its memory was released"
                digit = rng.random() < 1.0 / (1.0 + math.exp(-self.theta))
                ids.append(rng.choice(self.digits if digit else self.letters))
                logps.append(log_p(self.theta, digit))
            results.append(GenerateResult(ids, self.decode(ids), "length", logps, self.version, 0))
        return results


class FakeEngines:
    """`slime_core.rollout_backend.Engines` over fake engines (transports: tensor and disk)."""

    transports = ("tensor", "disk")
    restartable = True

    def __init__(self, engines: list[FakeEngine], tokenizer):
        self.engines, self.tokenizer = engines, tokenizer
        self._urls = itertools.count(len(Recorder.engines))

    @property
    def urls(self) -> list[str]:
        return [engine.url for engine in self.engines]

    async def _each(self, name: str, action) -> None:
        Recorder.calls[f"engine.{name}"] += 1
        for engine in self.engines:
            if not engine.alive:
                raise EngineUnavailable(f"fake engine {engine.url} is gone")
            action(engine)

    async def pause(self) -> None:
        await self._each("pause", lambda e: e.running.clear())

    async def resume_generation(self) -> None:
        await self._each("resume_generation", lambda e: e.running.set())

    async def abort(self) -> None:
        await self._each("abort", lambda e: None)

    async def flush_cache(self) -> None:
        await self._each("flush_cache", lambda e: None)

    async def release_memory(self) -> None:
        await self._each("release_memory", lambda e: setattr(e, "resident", False))

    async def resume_memory(self) -> None:
        await self._each("resume_memory", lambda e: setattr(e, "resident", True))

    async def update_weights_from_tensor(self, bucket: WeightBucket, version: str) -> None:
        theta = float(dict(bucket.tensors())["theta"][0])
        await self._each("update_weights_from_tensor", lambda e: e.__dict__.update(theta=theta, version=version))

    async def update_weights_by_broadcast(self, bucket, version: str) -> None:
        raise AssertionError("the fake engines do not take the broadcast transport")

    async def update_weights_from_disk(self, path: str, version: str) -> None:
        theta = json.loads((Path(path) / "theta.json").read_text())["theta"]
        await self._each("update_weights_from_disk", lambda e: e.__dict__.update(theta=theta, version=version))

    async def pull_weights(self, source_dir: str, local_dir: str, version: int) -> None:
        raise AssertionError("the fake engines do not take delta weight updates")

    async def close_weight_updates(self) -> None:
        Recorder.calls["engine.close_weight_updates"] += 1

    def health_problem(self, index: int, timeout: float) -> str | None:
        return None if self.engines[index].alive else "died"

    def restart(self, index: int) -> str:
        Recorder.calls["engine.restart"] += 1
        self.engines[index] = FakeEngine(f"fake://engine-{next(self._urls)}", self.tokenizer)
        return self.engines[index].url

    def only(self, index: int) -> FakeEngines:
        return FakeEngines([self.engines[index]], self.tokenizer)

    def shutdown(self) -> None:
        Recorder.calls["engine.shutdown"] += 1
        for engine in self.engines:
            engine.stopped = True


class FakeClient:
    """The generation client for a fake engine's or the fake router's address."""

    def __init__(self, url: str):
        self.url = url

    def _engine(self) -> FakeEngine:
        router = Recorder.routers.get(self.url)
        return Recorder.engines[router.next_worker() if router else self.url]

    async def generate(
        self, input_ids, sampling, return_logprob=True, rid=None, image_data=None, video_data=None
    ) -> GenerateResult:
        return (await self._engine().generate(sampling, 1))[0]

    async def generate_parallel(
        self, input_ids, sampling, n, return_logprob=True, image_data=None, video_data=None
    ) -> list[GenerateResult]:
        return await self._engine().generate(sampling, n)

    async def close(self) -> None:
        Recorder.calls["client.close"] += 1


class FakeRolloutBackend:
    """`slime_core.rollout_backend.RolloutBackend`: ``--rollout-num-gpus`` fake engines."""

    def engine_bundles(self, config: Config, gpu: bool) -> list[dict[str, float]]:
        return [{"CPU": 1}] * (config.rollout_num_gpus or 1)

    def start(self, config: Config, actor_options, plugins) -> FakeEngines:
        Recorder.calls["backend.start"] += 1
        tokenizer = _tokenizer(config)
        count = config.rollout_num_gpus or 1
        return FakeEngines([FakeEngine(f"fake://engine-{i}", tokenizer) for i in range(count)], tokenizer)

    def client(self, url: str, api_key: str | None = None) -> FakeClient:
        return FakeClient(url)


class FakeRouter:
    """A `slime_core.router.Router` at ``fake://router`` sending each request to the next worker."""

    url = "fake://router"

    def __init__(self, worker_urls: list[str]):
        self._workers, self._turn = list(worker_urls), itertools.count()
        Recorder.routers[self.url] = self

    @classmethod
    def start(cls, config: Config, worker_urls, plugins) -> FakeRouter:
        Recorder.calls["router.start"] += 1
        return cls(worker_urls)

    def next_worker(self) -> str:
        return self._workers[next(self._turn) % len(self._workers)]

    def add_worker(self, url: str) -> None:
        Recorder.calls["router.add_worker"] += 1
        self._workers.append(url)

    def remove_worker(self, url: str) -> None:
        Recorder.calls["router.remove_worker"] += 1
        self._workers.remove(url)

    def workers(self) -> list[str]:
        return list(self._workers)

    def metrics(self) -> dict[str, float]:
        return {"router/fake_workers": float(len(self._workers))}

    def stop(self) -> None:
        Recorder.calls["router.stop"] += 1


# ------------------------------------------------------------------ the plugin


class FakeBackendsPlugin:
    """Registers everything above under the name ``fake``, through the public hooks."""

    @staticmethod
    @hookimpl
    def slime_add_options(options):
        options.add(
            "--fake-train-seconds",
            type=float,
            default=0.0,
            group="fake backends (tests)",
            help="seconds each fake train step sleeps",
        )

    @staticmethod
    @hookimpl
    def slime_register_train_backends(register):
        register("fake", FakeTrainRank)

    @staticmethod
    @hookimpl
    def slime_register_rollout_backends(register):
        register("fake", FakeRolloutBackend())

    @staticmethod
    @hookimpl
    def slime_register_routers(register):
        register("fake", FakeRouter.start)

    @staticmethod
    @hookimpl
    def slime_register_reward_functions(register):
        register(
            "digit_share",
            lambda sample, config: sum(ch in DIGITS for ch in sample.response) / max(len(sample.response), 1),
        )
