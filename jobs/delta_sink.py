"""Exactly-once appends of Spark micro-batches into a Delta table, through Spark's own Delta writer.

Each append carries Delta's idempotent-write options ``txnAppId`` / ``txnVersion`` (the query's app
id and the micro-batch id): Delta commits them as an application transaction (``txn`` action) in the
same commit as the batch's files. A batch replayed after a crash between the Delta commit and Spark's
checkpoint commit has a version the table already holds for that app id, and Delta skips it: every
batch lands exactly once, without scanning the table's history.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the job imports pyspark where it needs it
    from pyspark.sql import DataFrame, SparkSession


def append_once(batch: DataFrame, table_dir: Path, app_id: str, batch_id: int) -> None:
    """Append ``batch`` as micro-batch ``batch_id`` of ``app_id``; Delta skips a batch id committed before.

    For example, in ``foreachBatch``::

        append_once(batch, Path("data/orders"), "orders-to-delta", batch_id)
    """
    (
        batch.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
        .save(str(table_dir))
    )


def overwrite_once(rows: DataFrame, table_dir: Path, app_id: str, batch_id: int) -> None:
    """Replace the table's contents with ``rows`` as micro-batch ``batch_id`` of ``app_id`` (a derived table
    folded forward batch by batch); Delta skips a batch id committed before, as ``append_once``."""
    (
        rows.write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
        .save(str(table_dir))
    )


def read(spark: SparkSession, table_dir: Path) -> DataFrame:
    return spark.read.format("delta").load(str(table_dir))


def row_count(table_dir: Path) -> int:
    """The rows of the table's current version, from its files' Parquet footers: no Spark job (a job's progress
    line asks every 2 s, beside the queries it watches)."""
    from deltalake import DeltaTable

    return int(DeltaTable(str(table_dir)).to_pyarrow_dataset().count_rows())


def sorted_rows(table_dir: Path, by: list[str]) -> list[dict[str, Any]]:
    """The table's current rows, sorted by the columns ``by``, read without Spark (a small table)."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(table_dir)).to_pyarrow_table()
    return list(rows.sort_by([(column, "ascending") for column in by]).to_pylist())


def exists(table_dir: Path) -> bool:
    """A first commit is in (the log folder appears before it)."""
    return any((table_dir / "_delta_log").glob("*.json"))
