"""A broker-only install: `pip install sparkmq` pulls no Spark/Delta, and everything but the Spark
connector runs without them (checked by running `sparkmq dev` with those imports made impossible)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

from support.processes import REPO_ROOT

SPARK_ONLY = ("pyspark", "pyarrow", "delta-spark", "deltalake", "fsspec")
# Run as `python -c`: make every Spark-side import fail, then run the sparkmq command line.
BLOCKED_MAIN = """
import importlib.abc, runpy, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "pyarrow", "delta", "deltalake", "fsspec"):
            raise ImportError(f"{name} is not installed (broker-only install)")
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["sparkmq", *sys.argv[1:]]
runpy.run_module("sparkmq", run_name="__main__")
"""


def _requirement_names(requirements: list[str]) -> set[str]:
    return {r.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower() for r in requirements}


def test_the_base_install_has_no_spark_or_delta_and_the_spark_extra_has_them() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    base = _requirement_names(project["dependencies"])
    assert not base & set(SPARK_ONLY), f"the base install pulls {sorted(base & set(SPARK_ONLY))}"
    assert {"prometheus-client", "starlette", "uvicorn"} <= base
    assert set(SPARK_ONLY) <= _requirement_names(project["optional-dependencies"]["spark"])
    assert "-e '.[spark,test,grpc]'" in (REPO_ROOT / "Makefile").read_text()  # make run / make test get everything


def test_sparkmq_dev_runs_without_spark_and_says_how_to_connect(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    args = [
        sys.executable,
        "-c",
        BLOCKED_MAIN,
        "dev",
        "--store-dir",
        str(tmp_path / "store"),
        "--port",
        "0",
        "--namesrv-port",
        "0",
        "--set",
        "mapedFileSizeCommitLog=16777216",
        "--set",
        "maxHashSlotNum=50000",
        "--set",
        "maxIndexNum=200000",
    ]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    assert process.stdout is not None
    lines: list[str] = []
    try:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops both"):
                break
        printed = [line for line in lines if " INFO " not in line and " WARNING " not in line]
        assert printed and printed[0].startswith("dev namesrv "), "\n".join(lines)
        ns = printed[0].split()[2]
        assert f"  export NAMESRV_ADDR={ns}" in printed
        assert f"  sparkmq dashboard --namesrv {ns} --port 8080" in printed
        assert any(line.startswith("  broker      broker-a (DefaultCluster) on ") for line in printed)
    finally:
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=30)[0]
    assert process.returncode == 0, "\n".join(lines) + rest
    assert "Traceback" not in rest
