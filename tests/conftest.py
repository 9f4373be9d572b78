"""Fixtures every test folder may use: the SparkSession of a process and fresh names.

``make test-suite`` runs ``-n 2 --dist loadfile``: each test file runs whole on one pytest-xdist worker,
so its module fixtures (a broker, a cluster, a pair of JVM brokers) start once. Each worker builds its
own SparkSession for the Spark files it gets; no test stops or rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: a test asserts behaviour, and timings belong in bench/ (a loaded machine would
# otherwise fail a correct example for being slow). A profile chosen on the command line is kept.
settings.register_profile("suite", deadline=None)
if settings.get_current_profile_name() == "default":
    settings.load_profile("suite")


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
