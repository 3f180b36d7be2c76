"""`slime_sglang.sglang_server` hands SGLang the run's keys as flags in its own ``sys.argv``,
from the environment: not on the command line that ``ps`` shows, nor in the environment its
children inherit. SGLang's launcher is a stand-in here (SGLang is a GPU install); it records
what it was given."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from slime_core.cluster.network import Network

STAND_IN = """
import json, os, sys
from pathlib import Path
Path(os.environ["RECORD"]).write_text(json.dumps({
    "argv": sys.argv[1:], "name": __name__,
    "cmdline": Path("/proc/self/cmdline").read_bytes().decode().split("\\0"),
    "keys_in_environment": [k for k in ("SLIME_API_KEY", "SLIME_ADMIN_API_KEY") if k in os.environ]}))
"""


def test_sglang_gets_the_keys_as_flags_but_not_on_its_command_line(tmp_path):
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "launch_server.py").write_text(STAND_IN)
    network = Network.for_nodes(2)
    record = tmp_path / "record.json"
    env = {
        **os.environ,
        **network.key_env(),
        "RECORD": str(record),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    }
    subprocess.run(
        [sys.executable, "-m", "slime_sglang.sglang_server", "--model-path", "m", "--port", "30000"],
        env=env,
        check=True,
        timeout=60,
    )
    seen = json.loads(record.read_text())
    assert seen["name"] == "__main__"
    assert seen["argv"] == [
        "--model-path",
        "m",
        "--port",
        "30000",
        f"--api-key={network.token}",
        f"--admin-api-key={network.token}",
    ]
    assert not any(network.token in word for word in seen["cmdline"]), seen["cmdline"]
    assert seen["keys_in_environment"] == []
