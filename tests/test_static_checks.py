"""The static checks run with the suite: ruff (lint and format) and mypy, as configured in pyproject.toml.

Each check runs over the whole repository from its root and fails with the tool's own report, so a
failure reads like running the tool by hand (``ruff check .``, ``ruff format --check .``, ``mypy``).
mypy is strict on the pure layers and the store (``[[tool.mypy.overrides]]``), normal elsewhere.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

CHECKS = {
    "ruff check": [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
    "ruff format": [sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."],
    "mypy": [sys.executable, "-m", "mypy"],
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_static_check_passes(name: str) -> None:
    result = subprocess.run(CHECKS[name], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}{result.stderr}"
