"""Delta Lake in Spark: `make delta-jars` fills the cache; Spark reads a topic table written per the layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmq.client import Message
from sparkmq.tables.layout import RAW_COLUMNS, table_uri
from sparkmq.tables.spark_delta import DeltaJarsMissing, delta_jars
from support.delta_tables import require_delta, write_sent
from support.spark_harness import Cluster


def test_missing_jars_fail_under_ci_naming_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKMQ_JARS_DIR", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="run `make delta-jars`"):
        require_delta()
    with pytest.raises(DeltaJarsMissing, match="make delta-jars"):
        delta_jars()


def test_missing_jars_skip_elsewhere_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKMQ_JARS_DIR", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.warns(UserWarning, match="make delta-jars"), pytest.raises(pytest.skip.Exception):
        require_delta()


def test_spark_reads_a_topic_table_with_the_sources_columns(delta_spark, cluster: Cluster, tmp_path: Path) -> None:
    topic = cluster.topic(queues=2, prefix="Table")
    messages = [
        Message(topic, f"order-{i}".encode(), tags=f"t{i % 3}", keys=[f"k{i}"], properties={"n": str(i)})
        for i in range(40)
    ]
    results = cluster.send(messages)
    uri = table_uri(str(tmp_path / "tables"), topic)
    write_sent(uri, messages, results)

    table = delta_spark.read.format("delta").load(uri)
    assert tuple(table.columns) == RAW_COLUMNS
    assert delta_spark.conf.get("spark.databricks.delta.snapshotPartitions") == "1"
    rows = sorted((r.queueId, r.queueOffset, r.body, r.tags, r.keys, r.properties["n"]) for r in table.collect())
    stream = (
        delta_spark.read.format("sparkmq")
        .option("namesrvAddr", cluster.ns)
        .option("topic", topic)
        .option("includeProperties", "true")
        .load()
    )
    expected = sorted((r.queueId, r.queueOffset, r.body, r.tags, r.keys, r.properties["n"]) for r in stream.collect())
    assert rows == expected and len(rows) == len(messages)
