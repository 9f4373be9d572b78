"""The main job's Delta landing (jobs/delta_sink.py): exactly once through Delta application transactions.

A replayed micro-batch (Spark re-runs the last batch after a crash between the Delta commit and
its own checkpoint commit) is skipped because the table's ``txn`` for the app id already holds
that batch id; another app id writing the same table is independent.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from jobs.delta_sink import append_once, committed_version, read


def rows(*values: int) -> pa.Table:
    return pa.table({"n": pa.array(values, pa.int64())})


def test_a_replayed_batch_is_skipped_by_its_application_transaction(tmp_path: Path) -> None:
    table = tmp_path / "orders"
    assert committed_version(table, "app") == -1
    assert append_once(table, rows(1, 2), "app", 0)
    assert append_once(table, rows(3), "app", 1)
    assert not append_once(table, rows(3), "app", 1)  # the replay after a crash
    assert not append_once(table, rows(1, 2), "app", 0)
    assert sorted(read(table)["n"].to_pylist()) == [1, 2, 3]
    assert DeltaTable(str(table)).transaction_version("app") == 1
    assert append_once(table, rows(9), "other-app", 0)  # versions are per app id
    assert committed_version(table, "app") == 1 and committed_version(table, "other-app") == 0
    assert sorted(read(table)["n"].to_pylist()) == [1, 2, 3, 9]
