"""One real ``slime run`` (the test kit's fake backends, in this process, no Ray)
whose generate function, reward and dynamic-sampling filter are slime-style functions named
with slime's flags."""

P = "slime_style_plugins."


def test_slime_functions_run_through_the_real_loop(fake_loop, calls):
    from slime.utils.types import Sample

    records, _ = fake_loop(
        "--custom-generate-function-path",
        P + "digits_generate",
        "--custom-rm-path",
        P + "digit_reward",
        "--dynamic-sampling-filter-path",
        P + "keep_mixed",
    )
    assert [r["rollout/reward_mean"] for r in records] == [0.5, 0.5]  # "7" scores 1, "x" scores 0
    assert len(calls["generate"]) == len(calls["rm"]) == 2 * 2 * 2
    assert calls["generate"][0] == ("router", 4, False)  # args.sglang_router_ip from the run's router address
    assert {seen[0] for seen in calls["rm"]} == {Sample} and len(calls["filter"]) == 4
