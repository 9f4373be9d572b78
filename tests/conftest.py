"""How the suite spreads over pytest-xdist workers (``make test-suite`` runs ``-n 2 --dist loadgroup``).

Each test file is one group, so its module fixtures (a broker, a cluster) start once, on one worker.
Every test that uses a SparkSession joins one group instead: the session is one JVM per process, and
a module that stops it (or builds it with other settings) must not pull it from under another file's
test on the same worker, so Spark's tests run on one worker in the suite's own order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        uses_spark = "spark" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group("spark" if uses_spark else item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one test SparkSession of a process (Delta's jars configured when ``make delta-jars`` fetched them)."""
    from support.spark_harness import session_for_tests  # pyspark only for the tests that ask for it

    with session_for_tests() as session:
        yield session


@pytest.fixture
def names(tmp_path: Path) -> object:
    """Fresh group / checkpoint names for one test."""
    from support.spark_harness import Names

    return Names(tmp_path)
