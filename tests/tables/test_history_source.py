"""Issue 32, the source's ``history=table``: offsets below what the broker still holds come from the topic's table.

A broker of its own with forced retention (64 KiB CommitLog segments, every clean pass deletes all
but the newest) loses the first offsets of a two-queue topic; the test then writes the topic's table
per the layout, holding each queue's offsets up to a few past the broker's new minimum (as the
broker's materializer would have, before retention). A batch or streaming read from ``earliest``
with ``history=table`` returns every offset exactly once, the old ones from the table and the rest
from the broker, and a stream goes on with new messages from the broker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkmq.client import Message, SendResult
from sparkmq.connector.options import SourceOptions
from sparkmq.errors import OptionError
from sparkmq.tables.layout import table_uri
from support.delta_tables import next_offset, write_sent
from support.processes import BrokerProcess, NamesrvProcess
from support.spark_harness import (
    RETENTION_ARGS,
    Cluster,
    Collected,
    failure_of,
    reader,
    run_available_now,
    start_query,
    wait_until,
)

QUEUES = 2
SENT = 300
OVERLAP = 5  # offsets both the table and the broker hold: read once, from the broker


@dataclass
class Shrunk:
    """A topic whose first offsets retention deleted, and its table holding them."""

    cluster: Cluster
    topic: str
    root: str
    minimum: dict[int, int]
    messages: list[Message]
    results: list[SendResult]

    @property
    def sent(self) -> dict[tuple[int, int], bytes]:
        """(queue id, offset) → body."""
        return {
            (r.queue.queue_id, r.queue_offset): m.body_bytes for m, r in zip(self.messages, self.results, strict=True)
        }

    def rows(self, batch: list) -> list[tuple[int, int, bytes]]:
        return sorted((r.queueId, r.queueOffset, bytes(r.body)) for r in batch)

    def expected(self) -> list[tuple[int, int, bytes]]:
        return sorted((q, offset, body) for (q, offset), body in self.sent.items())


def _body(i: int) -> bytes:
    return f"{i:05d}".encode() + b"." * 1000


@pytest.fixture(scope="module")
def shrunk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shrunk]:
    store, tables = tmp_path_factory.mktemp("history-store"), tmp_path_factory.mktemp("history-tables")
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address, *RETENTION_ARGS) as broker:
        cluster = Cluster(namesrv, broker)
        try:
            topic = cluster.topic(queues=QUEUES, prefix="Old")
            messages = [Message(topic, _body(i)) for i in range(SENT)]
            results: list[SendResult] = cluster.send(messages)
            wait_until(
                lambda: all(cluster.min_offset(topic, q) > OVERLAP for q in range(QUEUES)),
                60,
                "retention to delete the first segments",
            )
            minimum = {q: cluster.min_offset(topic, q) for q in range(QUEUES)}
            root = str(tables)
            write_sent(table_uri(root, topic), messages, results, {q: minimum[q] + OVERLAP for q in range(QUEUES)})
            yield Shrunk(cluster, topic, root, minimum, messages, results)
        finally:
            cluster.close()


def test_bad_history_options_are_named_errors() -> None:
    base = {"namesrvAddr": "127.0.0.1:9876", "topic": "t"}
    for options, named in (
        ({"history": "lake"}, "history"),
        ({"history": "table"}, "tableRoot"),
        ({"tableRoot": "/tables"}, "tableRoot"),
        ({"history": "table", "tableRoot": "/tables", "wideSchema": "true"}, "wideSchema"),
        ({"history": "table", "tableRoot": "/tables", "subExpression": "A"}, "history"),
    ):
        with pytest.raises(OptionError) as raised:
            SourceOptions.parse({**base, **options})
        assert raised.value.option == named, options
    assert SourceOptions.parse({**base, "History": "TABLE", "tableRoot": "/tables"}).table_root == "/tables"


def test_a_batch_read_from_earliest_reads_the_table_then_the_broker(spark, shrunk: Shrunk) -> None:
    assert all(shrunk.cluster.min_offset(shrunk.topic, q) == shrunk.minimum[q] for q in range(QUEUES))
    df = (
        spark.read.format("sparkmq")
        .option("namesrvAddr", shrunk.cluster.ns)
        .option("topic", shrunk.topic)
        .option("history", "table")
        .option("tableRoot", shrunk.root)
        .option("includeProperties", "true")
        .load()
    )
    assert df.columns == list(
        SourceOptions.parse({"namesrvAddr": "x", "topic": "t", "includeProperties": "true"}).columns
    )
    assert shrunk.rows(df.collect()) == shrunk.expected()


def test_a_stream_from_earliest_reads_every_offset_once_and_goes_on(spark, shrunk: Shrunk, names) -> None:
    df = reader(
        spark,
        shrunk.cluster,
        topic=shrunk.topic,
        consumerGroup=names.group,
        startingOffsets="earliest",
        history="table",
        tableRoot=shrunk.root,
        maxOffsetsPerTrigger=70,  # batches that end inside the table's part, across the cut, in the broker's
    ).load()
    collected, _ = run_available_now(df, names.checkpoint())
    assert len(collected.batches) > 2
    assert shrunk.rows(collected.rows) == shrunk.expected()
    maxima = {q: shrunk.cluster.max_offset(shrunk.topic, q) for q in range(QUEUES)}
    assert {q: shrunk.cluster.committed(names.group, shrunk.topic, q) for q in range(QUEUES)} == maxima
    later = shrunk.cluster.send([Message(shrunk.topic, b"later-%d" % i) for i in range(6)])
    more, _ = run_available_now(df, names.checkpoint())
    assert sorted((r.queueId, r.queueOffset) for r in more.rows) == sorted(
        (r.queue.queue_id, r.queue_offset) for r in later
    )


def test_offsets_the_table_does_not_hold_fail_naming_the_table(spark, shrunk: Shrunk, names, tmp_path: Path) -> None:
    short = str(tmp_path / "short")
    write_sent(table_uri(short, shrunk.topic), shrunk.messages, shrunk.results, {0: 3, 1: 0})
    assert next_offset(table_uri(short, shrunk.topic), shrunk.topic, 0) == 3
    df = reader(
        spark,
        shrunk.cluster,
        topic=shrunk.topic,
        consumerGroup=names.group,
        startingOffsets=json.dumps({shrunk.topic: {"0": 0, "1": shrunk.minimum[1]}}),
        history="table",
        tableRoot=short,
    ).load()
    message = failure_of(start_query(df, names.checkpoint(), Collected(), available_now=True))
    assert f"queue {shrunk.topic}/broker-a/0 offsets [0, {shrunk.minimum[0]})" in message, message[-3000:]
    assert f"the table {table_uri(short, shrunk.topic)} holds 3 of those" in message
