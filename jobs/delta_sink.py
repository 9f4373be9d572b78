"""Exactly-once appends of Spark micro-batches into a Delta table written with ``deltalake``.

Each commit records the micro-batch id in its commit metadata; a replayed batch (after a
crash between the Delta commit and Spark's checkpoint commit) finds its id already there
and is skipped, so every batch lands exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

BATCH_ID_KEY = "sparkmq.batchId"


def last_batch_id(table_dir: Path) -> int:
    """The highest micro-batch id committed to the table (-1 for a new table)."""
    if not (table_dir / "_delta_log").exists():
        return -1
    for commit in DeltaTable(str(table_dir)).history(20):
        if BATCH_ID_KEY in commit:
            return int(commit[BATCH_ID_KEY])
    return -1


def append_once(table_dir: Path, rows: pa.Table, batch_id: int) -> bool:
    """Append ``rows`` as micro-batch ``batch_id`` unless it was committed before; True if written."""
    if batch_id <= last_batch_id(table_dir):
        return False
    write_deltalake(str(table_dir), rows, mode="append",
                    commit_properties=CommitProperties(custom_metadata={BATCH_ID_KEY: str(batch_id)}))
    return True


def overwrite(table_dir: Path, rows: pa.Table) -> None:
    """Replace the table's contents (a derived table recomputed from the raw one)."""
    write_deltalake(str(table_dir), rows, mode="overwrite", schema_mode="overwrite")


def read(table_dir: Path) -> pa.Table:
    return DeltaTable(str(table_dir)).to_pyarrow_table()
