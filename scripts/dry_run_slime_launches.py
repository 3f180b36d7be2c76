"""Dry-run every launch script of a THUDM/slime checkout with `slime run --dry-run`.

    python scripts/dry_run_slime_launches.py PATH_TO_SLIME_CHECKOUT [--flags]

A launch script is a ``*.sh`` under ``scripts/`` or ``examples/`` that starts ``train.py`` or
``train_async.py``. Each one runs in a sandboxed bash: only harmless text tools are on PATH,
every other command (``pkill``, ``ray start``, ``nvidia-smi``, downloads) does nothing, and the
``python3 train.py ...`` command (directly or behind ``ray job submit ... --``) is captured
instead of run. The captured flags go through ``slime run --dry-run`` (``train_async.py`` as
``slime run --async``) in this process. The scripts name data and model files on their
authors' machines: a missing data file is counted, then stood in for by an empty file so that
the checks that follow the data checks (the train backend's, e.g. the parallel layout against
the model, which the launch's architecture flags describe when its ``--hf-checkpoint`` is not
here) still run. Per launch it prints whether a real run (given its files) would be refused,
and why; the ``--*-path`` function hooks are counted apart. ``--flags`` prints the distinct
flags the launches pass instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

#: tools the scripts need to compute their flags; anything else is a no-op in the sandbox (grep
#: always succeeds: it filters the output of tools that are not there, e.g. `pip list | grep`)
SAFE_TOOLS = (
    "dirname",
    "basename",
    "realpath",
    "readlink",
    "cat",
    "sed",
    "awk",
    "head",
    "tail",
    "cut",
    "tr",
    "wc",
    "date",
    "expr",
    "seq",
    "ls",
    "env",
    "true",
    "false",
    "sort",
    "uniq",
    "bash",
    "mktemp",
)
#: records ``python3 [-opts] train.py|train_async.py ARGS`` (also after ``ray job submit ... --``)
CAPTURE = r"""#!/bin/bash
while [ $# -gt 0 ] && [ "$1" != "--" ] && [ "$(basename "$0")" = ray ]; do shift; done
[ "$(basename "$0")" = ray ] && { shift; [ $# -gt 0 ] || exit 0; shift; }
while [ $# -gt 0 ] && [[ "$1" == -* ]]; do shift; done
case "$(basename "${1:-}")" in
  train.py|train_async.py) printf '%s\0' "$(basename "$1")" "${@:2}" > "$SLIME_CAPTURE/$(date +%s%N)";;
esac
exit 0
"""
#: defined before the script runs: no signals, no failing cd, unknown commands do nothing, and a
#: model file sourced from the author's checkout (/root/slime/scripts/models/X.sh) comes from ours
PRELUDE = r"""kill(){ :; }; cd(){ builtin cd "$@" 2>/dev/null || true; }; command_not_found_handle(){ return 0; }
source(){ local f="$1"; shift; [[ ! -f "$f" && "$f" == */scripts/models/* ]] && f="$SLIME_CHECKOUT/scripts/models/${f##*/}"
builtin source "$f" "$@"; }
"""  # noqa: E501
#: variables the scripts insist on (checkpoint folders, the Megatron-LM checkout), as dummy paths
DUMMY_ENV = {
    "BASE_FOLDER": "/dummy/models",
    "BASE_DIR": "/dummy",
    "MEGATRON_LM_PATH": "/dummy/Megatron-LM",
    "MASTER_ADDR": "127.0.0.1",
    "WANDB_KEY": "dummy-key",
    "WANDB_API_KEY": "dummy-key",
}
MISSING = re.compile(r"does not exist|no such directory|has no config\.json|config file .* does not exist")
MISSING_DATA = re.compile(r"data file '(.+?)' does not exist")


def launch_scripts(checkout: Path) -> list[Path]:
    scripts = sorted(p for top in ("scripts", "examples") for p in (checkout / top).rglob("*.sh"))
    return [p for p in scripts if re.search(r"\btrain(_async)?\.py\b", p.read_text(errors="replace"))]


def capture_launches(script: Path, checkout: Path, sandbox: Path) -> list[list[str]]:
    """The argv of each train.py / train_async.py the script starts, first item the entry."""
    capture = Path(tempfile.mkdtemp(dir=sandbox))
    env = {
        "PATH": str(sandbox / "bin"),
        "HOME": str(sandbox),
        "TMPDIR": str(sandbox),
        "SLIME_CAPTURE": str(capture),
        "SLIME_CHECKOUT": str(checkout),
        **DUMMY_ENV,
    }
    subprocess.run(
        ["/bin/bash", "--noprofile", "--norc", "-c", PRELUDE + 'source "$0"', str(script)],
        cwd=sandbox,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return [f.read_bytes().decode().split("\0")[:-1] for f in sorted(capture.iterdir())]


def make_sandbox(parent: str) -> Path:
    """A folder whose ``bin`` holds the only commands a sandboxed script finds."""
    sandbox = Path(tempfile.mkdtemp(prefix="slime-launches-", dir=parent))
    (sandbox / "bin").mkdir()
    for tool in SAFE_TOOLS:
        if shutil.which(tool):
            os.symlink(shutil.which(tool), sandbox / "bin" / tool)
    (sandbox / "bin" / "grep").write_text(f'#!/bin/bash\n{shutil.which("grep")} "$@"\nexit 0\n')
    (sandbox / "bin" / "grep").chmod(0o755)
    for name in ("python3", "python", "ray"):
        (sandbox / "bin" / name).write_text(CAPTURE)
        (sandbox / "bin" / name).chmod(0o755)
    return sandbox


def dry_run_with_stand_ins(argv: list[str], sandbox: Path) -> tuple[list[str], list[str], list[str]]:
    """(missing data files, problems, notes) of `dry_run` on a captured launch, its missing data
    files replaced by an empty one (whose own problems are dropped), since the backends' checks
    run only on a config whose data files are there."""
    problems, notes = dry_run(argv)
    missing = [match.group(1) for problem in problems for match in [MISSING_DATA.search(problem)] if match]
    if not missing:
        return [], problems, notes
    stand_in = sandbox / "stand-in.jsonl"
    stand_in.touch()
    argv = [str(stand_in) if arg.partition("@")[0] in missing else arg for arg in argv]
    problems, notes = dry_run(argv)
    return missing, [problem for problem in problems if str(stand_in) not in problem], notes


def dry_run(argv: list[str]) -> tuple[list[str], list[str]]:
    """(problems, notes) of ``slime run --dry-run`` on a captured launch; notes: no-effect flags."""
    from slime_core.cli.run import run_problems
    from slime_core.config import ConfigError, OptionSet, load_config
    from slime_core.config.accepted_flags import no_effect_notes
    from slime_core.config.no_effect import no_effect_warnings
    from slime_core.plugins import Plugins

    entry, flags = argv[0], argv[1:]
    flags = ["--dry-run"] + (["--train-mode", "async"] if entry == "train_async.py" else []) + flags
    plugins, options = Plugins(), OptionSet()
    plugins.add_options(options)
    try:
        config = load_config(flags, options, plugins, checks=lambda c: run_problems(c, plugins))
    except ConfigError as exc:
        return exc.errors, _notes(flags, options)
    return [], no_effect_warnings(config, options) + no_effect_notes(config)


def _notes(flags: list[str], options) -> list[str]:
    """The no-effect flags of a launch whose config has problems (read without validation)."""
    from slime_core.config import ConfigError, load_overrides
    from slime_core.config.accepted_flags import no_effect_notes

    try:
        return no_effect_notes(load_overrides(flags, options))
    except ConfigError:
        return []


def report(checkout: Path, sandbox: Path) -> int:
    """Per launch: RUNS, or REFUSED with what a real run would refuse (given its files)."""
    runs, total, refusals = 0, 0, Counter()
    for script in launch_scripts(checkout):
        for argv in capture_launches(script, checkout, sandbox) or [None]:
            total += 1
            name = script.relative_to(checkout)
            if argv is None:
                print(f"{name}: NOT CAPTURED (the sandbox did not reach its train.py command)")
                continue
            missing, problems, notes = dry_run_with_stand_ins(argv, sandbox)
            hooks = [p for p in problems if "-path" in p and not MISSING.search(p)]
            refused = [p for p in problems if p not in hooks and not MISSING.search(p)]
            runs += not refused and not hooks
            verdict = "REFUSED: a real run would stop at" if refused else "RUNS (given its files)"
            print(
                f"{name} ({argv[0]}): {verdict} ({len(missing)} missing data files, {len(hooks)} function-hook "
                f"problems, {len(notes)} flags without effect here)"
            )
            for line in refused + hooks:
                print(f"    - {line}")
                refusals[line.split(";")[0][:100]] += 1
    print(f"\n{runs}/{total} launches would run, given their data and model files; the others would be refused for:")
    for line, count in refusals.most_common():
        print(f"  {count:3d} x {line}")
    return 0 if runs == total else 1


def distinct_flags(checkout: Path, sandbox: Path) -> int:
    seen = Counter()
    for script in launch_scripts(checkout):
        for argv in capture_launches(script, checkout, sandbox):
            seen.update(a.partition("=")[0] for a in argv[1:] if a.startswith("--"))
    for flag, count in sorted(seen.items()):
        print(f"{flag} {count}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2 or not Path(sys.argv[1]).is_dir():
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as parent:
        command = distinct_flags if "--flags" in sys.argv[2:] else report
        sys.exit(command(Path(sys.argv[1]), make_sandbox(parent)))
