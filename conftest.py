"""Collect the docstring examples of sparkmq/ and jobs/ as tests: pytest's own ``--doctest-modules``
collector, applied to the package folders only (test helpers and scripts under tests/ and bench/
are not importable on their own)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

ROOT = Path(__file__).resolve().parent
DOCTEST_FOLDERS = (ROOT / "sparkmq", ROOT / "jobs")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix != ".py" or file_path.name == "__main__.py":  # __main__ runs the CLI when imported
        return None
    if not any(folder in file_path.parents for folder in DOCTEST_FOLDERS):
        return None
    return DoctestModule.from_parent(parent, path=file_path)
