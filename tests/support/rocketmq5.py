"""Run the real RocketMQ 5 Python client (PyPI rocketmq-python-client 5.1.2) for tests/grpc.

The client lives in ``<repo>/.venv-rocketmq5`` (``make rocketmq5-venv``; ``make venv`` includes it)
and is driven by ``tests/grpc/rmq5_client.py``, one JSON line per event, through the same
subprocess harness as the C++ client.
"""

from __future__ import annotations

import os
from pathlib import Path

from support.processes import REPO_ROOT
from support.rocketmq_cpp import CppClientRun

RMQ5_PYTHON = REPO_ROOT / ".venv-rocketmq5" / "bin" / "python"
RMQ5_DRIVER = REPO_ROOT / "tests" / "grpc" / "rmq5_client.py"


def require_rmq5_python() -> Path:
    """The interpreter with the 5.x client; a clear failure (not a skip) naming the make target."""
    if not os.access(RMQ5_PYTHON, os.X_OK):
        raise AssertionError(f"{RMQ5_PYTHON} is missing: run `make rocketmq5-venv`")
    return RMQ5_PYTHON


def run5(home: Path, *args: str) -> CppClientRun:
    """Start ``rmq5_client.py ARGS`` with HOME=``home`` (the client logs under $HOME/logs)."""
    return CppClientRun.start(home, *args, python=require_rmq5_python(), driver=RMQ5_DRIVER)
