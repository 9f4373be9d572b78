"""Fixtures for the table readers' tests: the test SparkSession (with Delta Lake) and a NameServer + broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.delta_tables import require_delta
from support.spark_harness import Cluster, Names, running_cluster, session_for_tests


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    with session_for_tests() as session:
        yield session


@pytest.fixture
def delta_spark(spark: object) -> object:
    """The session, for a test that needs Delta's jars (skipped loudly, or failed under CI, without them)."""
    require_delta()
    return spark


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("tables-store")) as made:
        yield made


@pytest.fixture
def names(tmp_path: Path) -> Names:
    return Names(tmp_path)
