"""``sparkmq --version``, ``sparkmq doctor`` and ``sparkmq completion bash``, run as a user runs them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import sparkmq
from support.processes import REPO_ROOT


def sparkmq_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "sparkmq", *args], capture_output=True, text=True, env=full_env, cwd=REPO_ROOT
    )


def findings(output: str) -> dict[str, list[tuple[str, str]]]:
    """check name -> [(level, detail)] from doctor's lines."""
    found: dict[str, list[tuple[str, str]]] = {}
    for line in output.splitlines():
        level, check, detail = line.split(None, 2)
        found.setdefault(check, []).append((level, detail))
    return found


def test_version_flag() -> None:
    shown = sparkmq_cli("--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"sparkmq {sparkmq.__version__}"


def test_doctor_reports_every_check_and_a_busy_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        shown = sparkmq_cli("doctor", "--store-dir", str(tmp_path / "store"), "--port", str(port))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    found = findings(shown.stdout)
    assert set(found) == {"python", "java", "native", "port", "disk", "clock"}
    assert found["python"] == [("ok", ".".join(map(str, sys.version_info[:3])))]
    assert found["port"][0][0] == "warn" and f"{port} (asked) in use" in found["port"][0][1]
    assert found["disk"][0][1].startswith(f"{tmp_path / 'store'}: ")
    assert all(level in ("ok", "warn", "fail") for entries in found.values() for level, _ in entries)


def test_doctor_tells_whether_the_native_extensions_are_switched_off() -> None:
    built = sorted((REPO_ROOT / "sparkmq").rglob("_*.so"))
    if not built:
        pytest.fail("no native extension is built in this checkout: run `make venv`")
    on = findings(sparkmq_cli("doctor", "--port", "1").stdout)["native"][0]
    off = findings(sparkmq_cli("doctor", "--port", "1", env={"SPARKMQ_NATIVE": "0"}).stdout)["native"][0]
    assert on[0] == off[0] == "ok"
    assert f"{len(built)} extensions built, in use" in on[1]
    assert "switched off by SPARKMQ_NATIVE=0" in off[1]


def test_doctor_finds_java_as_spark_needs_it() -> None:
    java = findings(sparkmq_cli("doctor", "--port", "1").stdout)["java"][0]
    if shutil.which("java") is None:
        assert java[0] == "warn" and "no java on PATH" in java[1]
    else:
        assert java[0] == "ok", java


def complete(script: str, words: str) -> list[str]:
    """What bash offers for the command line ``words`` (the cursor after its last word)."""
    line = words.split(" ")
    program = (
        f"{script}\n"
        f"COMP_WORDS=({' '.join(repr(word) for word in line)}); COMP_CWORD={len(line) - 1}\n"
        "_sparkmq; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    shown = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return shown.stdout.split()


def test_bash_completion_knows_commands_admin_commands_and_options() -> None:
    shown = sparkmq_cli("completion", "bash")
    assert shown.returncode == 0
    script = shown.stdout
    assert "doctor" in complete(script, "sparkmq do")
    offered = complete(script, "sparkmq admin updateT")
    assert "updateTopic" in offered and all(word.startswith("updateT") for word in offered)
    assert "--topic" in complete(script, "sparkmq admin --tls updateTopic -n x --to")
    assert complete(script, "sparkmq pyspark-bytecode ") == ["--help", "disable", "enable", "status"]
    assert complete(script, "sparkmq completion b") == ["bash"]
