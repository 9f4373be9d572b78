"""Fixtures for the table readers' tests: the session for Delta's tests and a NameServer + broker (the
SparkSession itself is the root conftest's, Delta's jars in it when fetched)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.delta_tables import require_delta
from support.spark_harness import Cluster, running_cluster


@pytest.fixture
def delta_spark(spark: object) -> object:
    """The session, for a test that needs Delta's jars (skipped loudly, or failed under CI, without them)."""
    require_delta()
    return spark


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("tables-store")) as made:
        yield made
