"""Fixtures for the Spark connector tests: one NameServer + broker (the SparkSession and fresh names per test
are the root conftest's).

The helpers (session builder, cluster questions over the protocol, query runners) live in
``tests/support/spark_harness.py`` so the subprocess driver can share them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.spark_harness import Cluster, running_cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("spark-store"), "--set", "enablePropertyFilter=true") as made:
        yield made
