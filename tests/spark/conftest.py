"""Fixtures for the Spark connector tests: ONE SparkSession, one NameServer + broker, fresh names per test.

The helpers (session builder, cluster questions over the protocol, query runners) live in
``tests/support/spark_harness.py`` so the subprocess driver can share them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.spark_harness import Cluster, Names, running_cluster, session_for_tests


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    with session_for_tests() as session:
        yield session


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("spark-store"), "--set", "enablePropertyFilter=true") as made:
        yield made


@pytest.fixture
def names(tmp_path: Path) -> Names:
    """Fresh group / checkpoint names for one test."""
    return Names(tmp_path)
