"""The command line imports only the module of the subcommand that runs; ``--help`` still lists them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sparkmq.cli.main import SUBCOMMANDS
from support.processes import REPO_ROOT

# Run as `python -c`: parse argv like the console script, then report which subcommand modules were imported.
IMPORTED_AFTER = """
import json, sys
from sparkmq.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(name for name in sys.modules if name.startswith("sparkmq.cli."))))
"""


def _sparkmq(*argv: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", code, *argv] if code else [sys.executable, "-m", "sparkmq", *argv]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)


def test_help_lists_every_subcommand_with_its_help_without_importing_any() -> None:
    done = _sparkmq("--help")
    assert done.returncode == 0, done.stderr
    listing = " ".join(done.stdout.split())  # argparse wraps long help lines
    for name, (_module, help_text) in SUBCOMMANDS.items():
        assert f"{name} {help_text}" in listing, name
    imported = json.loads(_sparkmq("--help", code=IMPORTED_AFTER).stdout.splitlines()[-1])
    assert not [name for name in imported if name.endswith("_command")], imported


def test_a_subcommand_imports_its_own_module_only_and_keeps_its_options() -> None:
    for name in ("namesrv", "broker"):
        done = _sparkmq(name, "--help", code=IMPORTED_AFTER)
        assert "--port" in done.stdout, done.stderr
        imported = set(json.loads(done.stdout.splitlines()[-1]))
        assert f"sparkmq.cli.{SUBCOMMANDS[name][0]}" in imported
        unused = {f"sparkmq.cli.{SUBCOMMANDS[other][0]}" for other in ("admin", "dashboard", "proxy", "doctor", "dev")}
        assert not imported & unused, imported & unused  # mqadmin, the web stack, gRPC


def test_bad_input_is_still_refused_by_argparse() -> None:
    unknown = _sparkmq("no-such-command")
    assert unknown.returncode == 2 and "invalid choice: 'no-such-command'" in unknown.stderr
    bad_option = _sparkmq("namesrv", "--no-such-option")
    assert bad_option.returncode == 2 and "unrecognized arguments: --no-such-option" in bad_option.stderr
    assert _sparkmq("--log-level", "WARNING", "version").stdout.strip()  # a top-level option before the command
