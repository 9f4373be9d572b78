"""Exactly-once appends of Spark micro-batches into a Delta table written with ``deltalake``.

Each append commits, in the same Delta commit as its files, an application transaction
``(app_id, version=batch_id)`` (Delta's ``txn`` action, what Spark's own Delta sink uses). A
batch replayed after a crash between the Delta commit and Spark's checkpoint commit finds
``transaction_version(app_id) >= batch_id`` and is skipped: every batch lands exactly once,
without scanning the table's history.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake


def committed_version(table_dir: Path, app_id: str) -> int:
    """The last micro-batch id ``app_id`` committed to the table (-1 for none, or no table yet)."""
    if not (table_dir / "_delta_log").exists():
        return -1
    version = DeltaTable(str(table_dir)).transaction_version(app_id)
    return -1 if version is None else int(version)


def append_once(table_dir: Path, rows: pa.Table, app_id: str, batch_id: int) -> bool:
    """Append ``rows`` as micro-batch ``batch_id`` of ``app_id`` unless it was committed before; True if written.

    For example::

        append_once(Path("data/orders"), batch.toArrow(), "orders-to-delta", batch_id)
    """
    if batch_id <= committed_version(table_dir, app_id):
        return False
    write_deltalake(
        str(table_dir),
        rows,
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id=app_id, version=batch_id)]),
    )
    return True


def overwrite(table_dir: Path, rows: pa.Table) -> None:
    """Replace the table's contents (a derived table recomputed from the raw one)."""
    write_deltalake(str(table_dir), rows, mode="overwrite", schema_mode="overwrite")


def read(table_dir: Path) -> pa.Table:
    return DeltaTable(str(table_dir)).to_pyarrow_table()
