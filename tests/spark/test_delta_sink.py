"""The main job's Delta landing (jobs/delta_sink.py): exactly once through Spark's Delta writer.

A replayed micro-batch (Spark re-runs the last batch after a crash between the Delta commit and
its own checkpoint commit) is skipped because the table's ``txn`` for the app id already holds
that batch id (Delta's ``txnAppId`` / ``txnVersion``); another app id writing the same table is
independent. The job's revenue table takes each batch's revenue once, a replay skipped the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from deltalake import DeltaTable

from jobs.delta_sink import append_once, exists, read, row_count, sorted_rows
from jobs.orders_pipeline import ORDER_SCHEMA, add_revenue, revenue
from support.delta_tables import require_delta


def test_a_replayed_batch_is_skipped_by_its_application_transaction(spark, tmp_path: Path) -> None:
    require_delta()
    table = tmp_path / "orders"

    def batch(*values: int):  # noqa: ANN202 - a DataFrame
        return spark.createDataFrame([(v,) for v in values], "n long")

    assert not exists(table)
    append_once(batch(1, 2), table, "app", 0)
    append_once(batch(3), table, "app", 1)
    append_once(batch(3), table, "app", 1)  # the replay after a crash
    append_once(batch(1, 2), table, "app", 0)
    assert sorted(r.n for r in read(spark, table).collect()) == [1, 2, 3]
    assert DeltaTable(str(table)).transaction_version("app") == 1
    append_once(batch(9), table, "other-app", 0)  # versions are per app id
    assert DeltaTable(str(table)).transaction_version("other-app") == 0
    assert sorted(r.n for r in read(spark, table).collect()) == [1, 2, 3, 9]
    assert row_count(table) == 4  # the job's progress and summary read the table without Spark
    assert [r["n"] for r in sorted_rows(table, ["n"])] == [1, 2, 3, 9]


def test_revenue_sums_each_category_per_minute(spark) -> None:
    at = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    orders = spark.createDataFrame(
        [(1, at.replace(second=5), "books", 10.0), (2, at.replace(second=50), "books", 2.5)]
        + [(3, at.replace(minute=1), "games", 4.0)],
        "order_id long, ordered_at timestamp, category string, amount double",
    )
    rows = sorted((r.window_start.minute, r.category, r.revenue, r.orders) for r in revenue(orders).collect())
    assert rows == [(0, "books", 12.5, 2), (1, "games", 4.0, 1)]


def test_each_batch_adds_its_revenue_once(spark, tmp_path: Path) -> None:
    require_delta()
    table, at = tmp_path / "revenue", datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def batch(*orders: tuple[int, str, float]):  # noqa: ANN202 - a DataFrame
        return revenue(spark.createDataFrame([(n, at, c, a) for n, c, a in orders], ORDER_SCHEMA))

    add_revenue(batch((1, "books", 10.0), (2, "games", 4.0)), table, "app", 0)
    add_revenue(batch((3, "books", 2.5)), table, "app", 1)
    add_revenue(batch((3, "books", 2.5)), table, "app", 1)  # the replay after a crash
    rows = [(r["category"], r["revenue"], r["orders"]) for r in sorted_rows(table, ["category"])]
    assert rows == [("books", 12.5, 2), ("games", 4.0, 1)]
    assert DeltaTable(str(table)).transaction_version("app") == 1
