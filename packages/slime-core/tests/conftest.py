"""Fixtures shared by slime-core's tests."""

import json

import pytest

from slime_core.config import OptionSet
from slime_core.plugins import Plugins


@pytest.fixture
def plugins():
    return Plugins()


@pytest.fixture
def options(plugins):
    opts = OptionSet()
    plugins.add_options(opts)
    return opts


@pytest.fixture(scope="session")
def tokenizer():
    from slime_core.tools.tiny_models import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture
def write_jsonl(tmp_path):
    """Write records (dicts, or raw strings for broken lines) to a JSONL file; return its path."""

    def write(records, name="data.jsonl"):
        path = tmp_path / name
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
        return path

    return write
