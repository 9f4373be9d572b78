"""A topic's history from its table, for the Spark source's ``history=table``: what a table holds, and reading it.

Per ``layout``, a table holds the offsets [first, next) of each queue, ``next`` being the version of
the queue's application transaction. The source reads offsets below a queue's minimum on the broker
from the table, the rest from the broker; :func:`read_offsets` returns exactly [start, end) of one
queue, in offset order, or raises :class:`DataLossError` when the table does not hold them all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable

from sparkmq.connector.columns import arrow_schema
from sparkmq.errors import DataLossError
from sparkmq.tables.layout import app_id

logger = logging.getLogger(__name__)
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class Held:
    """Offsets [first, next) of one queue in its table."""

    first: int
    next: int


def held_offsets(uri: str, topic: str, queue_ids: Sequence[int]) -> dict[int, Held]:
    """What the table at ``uri`` holds of each of ``queue_ids`` (queues it has none of are left out)."""
    if not DeltaTable.is_deltatable(uri):
        return {}
    table = DeltaTable(uri)
    nexts = {q: table.transaction_version(app_id(topic, q)) for q in queue_ids}
    held = {q: int(n) for q, n in nexts.items() if n is not None and n > 0}
    if not held:
        return {}
    scanned = table.to_pyarrow_dataset().to_table(
        columns=["queueId", "queueOffset"], filter=pc.field("queueId").isin(sorted(held))
    )
    firsts = scanned.group_by("queueId").aggregate([("queueOffset", "min")]).to_pylist()
    return {row["queueId"]: Held(row["queueOffset_min"], held[row["queueId"]]) for row in firsts}


def read_offsets(
    uri: str,
    topic: str,
    broker_name: str,
    queue_id: int,
    start: int,
    end: int,
    columns: tuple[str, ...],
    fail_on_data_loss: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The rows of offsets [start, end) of one queue, in offset order, with ``columns`` typed as the source's."""
    schema = arrow_schema(columns)
    if not DeltaTable.is_deltatable(uri):
        rows = schema.empty_table()
    else:
        wanted = (
            (pc.field("queueId") == queue_id)
            & (pc.field("brokerName") == broker_name)
            & (pc.field("queueOffset") >= start)
            & (pc.field("queueOffset") < end)
        )
        dataset: ds.Dataset = DeltaTable(uri).to_pyarrow_dataset()
        rows = dataset.to_table(columns=list(columns), filter=wanted).sort_by("queueOffset").cast(schema)
    if rows.num_rows != end - start:
        problem = (
            f"queue {topic}/{broker_name}/{queue_id} offsets [{start}, {end}) are below the broker's minimum offset "
            f"and the table {uri} holds {rows.num_rows} of those {end - start} rows"
        )
        if fail_on_data_loss:
            raise DataLossError(f"{problem}; set failOnDataLoss=false to read what it holds")
        logger.warning("sparkmq source: data loss: %s; reading what it holds (failOnDataLoss=false)", problem)
    yield from rows.to_batches(max_chunksize=BATCH_ROWS)


__all__ = ["Held", "held_offsets", "read_offsets"]
