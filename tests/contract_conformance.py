"""Proof, by the type checker, that every backend implements the contract it is registered for.

Not a test that runs: mypy checks this module (`.ci/run`, configured in the root
pyproject.toml). Each assignment below gives a class or function the type of the contract its
registration claims (a `RankClass`, a `RolloutBackend`, a `RouterStart`); a method missing,
renamed or with another signature fails the check, naming the class and the member. The real
backends are here with the fakes the driver's tests run with (`slime_core.testing.fakes`).
"""

from __future__ import annotations

from collections.abc import Callable

from slime_core.config import Config
from slime_core.rollout_backend import RolloutBackend
from slime_core.router import DirectRouter, RouterStart
from slime_core.testing.fakes import FakeRolloutBackend, FakeRouter, FakeTrainRank
from slime_core.train_backend import CriticRank, RankClass
from slime_fsdp.critic import FSDPCriticRank
from slime_fsdp.rank import FSDPTrainRank
from slime_megatron.rank import MegatronTrainRank
from slime_router.launch import start_router
from slime_sglang.backend import SGLangBackend
from slime_vllm.backend import VLLMBackend

CriticClass = Callable[[Config, int, int, str, int], CriticRank]

train_backends: list[RankClass] = [FSDPTrainRank, MegatronTrainRank, FakeTrainRank]
critics: list[CriticClass] = [FSDPCriticRank]
rollout_backends: list[RolloutBackend] = [SGLangBackend(), VLLMBackend(), FakeRolloutBackend()]
routers: list[RouterStart] = [start_router, DirectRouter.start, FakeRouter.start]
