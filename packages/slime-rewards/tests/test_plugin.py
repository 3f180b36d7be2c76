from slime_core.testing import check_plugin_installed


def test_found_through_its_entry_point_and_light_to_import():
    check_plugin_installed("rewards", "slime-rewards")


def test_every_reward_function_is_registered_with_its_boxed_variant():
    from slime_core.plugins import Plugins
    from slime_rewards.functions import REWARD_FUNCTIONS

    registry = Plugins().registry("reward_functions")
    ours = {name for name in registry.names() if registry.entry(name).distribution.startswith("slime-rewards")}
    assert ours == set(REWARD_FUNCTIONS) | {
        f"boxed_{name}" for name in REWARD_FUNCTIONS
    }  # other plugins may add theirs
    for name, fn in REWARD_FUNCTIONS.items():
        assert registry.get(name) is fn and registry.entry(name).distribution.startswith("slime-rewards")
        assert registry.get(f"boxed_{name}").__name__ == f"boxed_{name}"
