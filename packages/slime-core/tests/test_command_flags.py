"""Options rendered as flags are read back by argparse, whatever their values look like."""

import argparse

from slime_core.cluster.command_flags import as_flags


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-key")
    parser.add_argument("--port", type=int)
    parser.add_argument("--worker-urls", nargs="*", default=[])
    parser.add_argument("--dp-aware", action="store_true")
    parser.add_argument("--offset", type=int)
    return parser


def test_a_value_starting_with_a_dash_is_read_as_the_value():
    argv = as_flags({"api_key": "-Abc_12", "port": 31000, "offset": -3})
    assert argv == ["--api-key=-Abc_12", "--port", "31000", "--offset=-3"]
    args = _parser().parse_args(argv)
    assert (args.api_key, args.port, args.offset) == ("-Abc_12", 31000, -3)


def test_bare_flags_lists_and_left_out_values():
    argv = as_flags(
        {"dp_aware": True, "worker_urls": ["http://a:1", "http://b:2"], "api_key": None, "port": 0, "offset": False}
    )
    assert argv == ["--dp-aware", "--worker-urls", "http://a:1", "http://b:2", "--port", "0"]
    args = _parser().parse_args(argv)
    assert args.dp_aware and args.worker_urls == ["http://a:1", "http://b:2"] and args.port == 0 and args.offset is None
