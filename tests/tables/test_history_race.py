"""Issue 32, the source's ``history=table`` when the broker's minimum moves between planning and reading.

A batch read is planned while the broker still holds a topic's first offsets, so they are planned for
the broker; then retention (64 KiB segments, a clean pass every 200 ms deletes all but the newest)
deletes them, the table holding them as the broker's writer would have. The planned partitions, read
afterwards (the interleaving forced by waiting for the events, not by timing), return every planned
offset once, from the table; without a table holding them the read fails with DataLossError.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from sparkmq.client import Message
from sparkmq.connector.options import SourceOptions
from sparkmq.errors import DataLossError
from sparkmq.source import SparkmqBatchReader
from sparkmq.tables.layout import table_uri
from support.delta_tables import write_sent
from support.processes import BrokerProcess, NamesrvProcess
from support.spark_harness import RETENTION_ARGS, Cluster, wait_until

SENT = 120
PLANNED = 45  # sent before the planning: they fit the first 64 KiB segment, so retention deletes none yet
FAST_CLEAN = ("--set", "cleanResourceInterval=200")  # retention passes within the test, not every 10 s


def _body(i: int) -> bytes:
    return f"{i:05d}".encode() + b"." * 1000


def _offsets(batches: list[pa.RecordBatch]) -> list[tuple[int, bytes]]:
    table = pa.Table.from_batches(batches)
    return list(zip(table["queueOffset"].to_pylist(), table["body"].to_pylist(), strict=True))


def test_offsets_retention_deletes_after_the_planning_are_read_from_the_table(tmp_path: Path) -> None:
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(tmp_path / "store", namesrv.address, *RETENTION_ARGS, *FAST_CLEAN) as broker,
    ):
        cluster = Cluster(namesrv, broker)
        try:
            topic = cluster.topic(queues=1, prefix="Race")
            messages = [Message(topic, _body(i)) for i in range(SENT)]
            results = cluster.send(messages[:PLANNED])
            root = str(tmp_path / "tables")
            options = {"namesrvAddr": cluster.ns, "topic": topic, "history": "table", "tableRoot": root}
            options["startingOffsets"] = "earliest"
            planned_low = cluster.min_offset(topic, 0)
            reader = SparkmqBatchReader(SourceOptions.parse(options))
            partitions = reader.partitions()  # planned now: no table yet, everything from the broker
            (part,) = (r for p in partitions for r in p.ranges)
            assert part.table is None and part.start == planned_low and part.end == PLANNED

            results += cluster.send(messages[PLANNED:])
            wait_until(
                lambda: cluster.min_offset(topic, 0) > planned_low + 10, 60, "retention to delete the plan's start"
            )
            write_sent(table_uri(root, topic), messages, results)  # what the broker's writer took first

            rows = _offsets([batch for p in partitions for batch in reader.read(p)])
            expected = [(r.queue_offset, m.body_bytes) for m, r in zip(messages, results, strict=True)]
            assert rows == expected[planned_low:PLANNED]

            without_table = SparkmqBatchReader(SourceOptions.parse({**options, "tableRoot": str(tmp_path / "none")}))
            try:
                [list(without_table.read(p)) for p in partitions]
            except DataLossError as exc:
                assert f"offsets [{planned_low}, " in str(exc)
            else:
                raise AssertionError("a range neither the broker nor a table holds was read")
        finally:
            cluster.close()
