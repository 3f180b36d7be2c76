from slime_core.testing import check_plugin_installed


def test_found_through_its_entry_point_and_light_to_import():
    check_plugin_installed("router", "slime-router")
