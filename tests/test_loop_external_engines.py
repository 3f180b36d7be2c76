"""`slime run` on engines it did not start (``--rollout-external-engine-addrs``): the trainer's weights
reach them before the first rollout."""

import pytest

pytestmark = pytest.mark.integration


def test_external_engines_get_the_trainer_s_weights_before_the_first_rollout(slime_run, tmp_path):
    """An engine the run did not start serves whatever it was last given (here: another random
    model of the same shape); as in THUDM slime the trainer's weights reach it before the first
    rollout, so that rollout's engine log-probs are the trainer's."""
    from slime_core.tools.tiny_models import build_tiny_qwen3
    from slime_sglang.cpu_engine.launch import start_cpu_engine, stop, wait_healthy

    process, url = start_cpu_engine(build_tiny_qwen3(tmp_path / "other", seed=3), None, "--num-threads", "1")
    try:
        wait_healthy(process, url)
        records = slime_run("--num-rollout", "1", "--rollout-external-engine-addrs", url.removeprefix("http://"))
    finally:
        stop(process)
    assert records[0]["train/train_rollout_logprob_abs_diff"] < 1e-3
    assert "first weights pushed" in (tmp_path / "run" / "slime.log").read_text()
