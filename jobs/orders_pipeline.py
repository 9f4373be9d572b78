"""The main job: order events through sparkmq into Delta tables, exactly once, end to end.

1. An embedded NameServer + Broker start with their store under ``data/``.
2. A Spark streaming query turns the ``rate`` source into order events (JSON bodies, the
   category as tag, the order id as key) and writes them through the ``sparkmq`` sink.
3. A second streaming query reads the topic through the ``sparkmq`` source under a consumer
   group, appends the orders to a Delta table exactly once, and recomputes revenue per
   category per minute into a second Delta table.
4. It prints progress while it runs, then a summary: messages in and out, throughput, and
   the group's lag read from the broker (0 at the end).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from jobs.delta_sink import append_once, overwrite, read
from sparkmq import Admin, EmbeddedCluster

if TYPE_CHECKING:  # the functions below import pyspark where they need it
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

TOPIC = "orders"
GROUP = "orders-to-delta"
DELTA_APP_ID = "sparkmq-orders-to-delta"  # the Delta application transaction id of the landing query
CATEGORIES = ["books", "games", "music", "garden"]


def spark_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sparkmq-orders")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_producer(spark: SparkSession, namesrv: str, total: int, rate: int, checkpoint: Path) -> StreamingQuery:
    """A stream of ``total`` sample orders into the topic through the sparkmq sink."""
    from pyspark.sql import functions as F

    categories = F.array(*[F.lit(c) for c in CATEGORIES])
    orders = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rate)
        .load()
        .where(F.col("value") < total)
        .select(
            F.col("value").alias("order_id"),
            F.col("timestamp").alias("ordered_at"),
            F.element_at(categories, (F.col("value") % len(CATEGORIES) + 1).cast("int")).alias("category"),
            ((F.col("value") * 7919) % 20000 / 100.0 + 1).alias("amount"),
        )
    )
    messages = orders.select(
        F.to_json(F.struct("order_id", "ordered_at", "category", "amount")).alias("body"),
        F.col("category").alias("tags"),
        F.concat(F.lit("order-"), F.col("order_id").cast("string")).alias("keys"),
    )
    return (
        messages.writeStream.format("sparkmq")
        .option("namesrvAddr", namesrv)
        .option("topic", TOPIC)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )


def start_consumer(spark: SparkSession, namesrv: str, tables: Path, checkpoint: Path) -> StreamingQuery:
    """Read the topic under GROUP and land it in Delta: raw orders (exactly once) + revenue."""
    from pyspark.sql import functions as F

    schema = "order_id long, ordered_at timestamp, category string, amount double"
    source = (
        spark.readStream.format("sparkmq")
        .option("namesrvAddr", namesrv)
        .option("topic", TOPIC)
        .option("consumerGroup", GROUP)
        .option("startingOffsets", "earliest")
        .option("maxPartitions", spark.sparkContext.defaultParallelism)  # one task per core, not per queue
        .load()
    )
    orders = source.select(
        F.from_json(F.col("body").cast("string"), schema).alias("o"), "queueId", "queueOffset"
    ).select("o.*", "queueId", "queueOffset")

    def land(batch: DataFrame, batch_id: int) -> None:
        rows = batch.toArrow()
        if rows.num_rows == 0:
            return
        append_once(tables / "orders", rows, DELTA_APP_ID, batch_id)
        overwrite(tables / "revenue_per_minute", revenue(read(tables / "orders")))

    return (
        orders.writeStream.foreachBatch(land)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="2 seconds")
        .start()
    )


def revenue(orders: pa.Table) -> pa.Table:
    """Revenue and order count per category per minute window."""
    minute = pc.floor_temporal(orders["ordered_at"], unit="minute")
    table = pa.table({"window_start": minute, "category": orders["category"], "amount": orders["amount"]})
    grouped = table.group_by(["window_start", "category"]).aggregate([("amount", "sum"), ("amount", "count")])
    return grouped.rename_columns(["window_start", "category", "revenue", "orders"]).sort_by(
        [("window_start", "ascending"), ("category", "ascending")]
    )


def stop_between_batches(query: StreamingQuery, wait_s: float = 10.0) -> None:
    """Stop ``query`` while no micro-batch runs (the rate source keeps triggering empty batches after the
    last order): stopping mid-batch interrupts its tasks, and Spark logs that batch as aborted."""
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


def rate_of(query: StreamingQuery) -> float:
    """Rows per second of busy batch time over a query's recent progress."""
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    busy_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in batches)
    return sum(p["numInputRows"] for p in batches) / (busy_ms / 1000) if busy_ms else 0.0


def run(data_dir: Path, total: int, rate: int, timeout_s: float) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    tables, checkpoints = data_dir / "delta", data_dir / "checkpoints"
    started = time.monotonic()
    with EmbeddedCluster(data_dir / "store") as cluster, Admin(cluster.namesrv_address) as admin:
        print(
            f"sparkmq: namesrv {cluster.namesrv_address}, broker {cluster.broker_address}, store {data_dir / 'store'}"
        )
        spark = spark_session()
        producer = start_producer(spark, cluster.namesrv_address, total, rate, checkpoints / "producer")
        consumer = None
        sent = consumed = lag = -1
        try:
            while time.monotonic() - started < timeout_s:
                time.sleep(2)
                try:
                    lags = admin.consumer_lag(GROUP, TOPIC)
                except Exception as exc:  # the topic appears with the first acknowledged batch
                    print(f"  waiting for the first orders ({type(exc).__name__})")
                    continue
                if consumer is None:
                    consumer = start_consumer(spark, cluster.namesrv_address, tables, checkpoints / "consumer")
                sent = sum(q.broker_offset for q in lags)
                lag = sum(q.lag for q in lags)
                consumed = read(tables / "orders").num_rows if (tables / "orders" / "_delta_log").exists() else 0
                print(
                    f"  {time.monotonic() - started:5.1f}s  sent {sent:>7,}  in Delta {consumed:>7,}  group lag {lag:,}"
                )
                if sent >= total and lag == 0 and consumed >= total:
                    break
        finally:
            stop_between_batches(producer)
            if consumer is not None:
                stop_between_batches(consumer)
        elapsed = time.monotonic() - started
        produced_rate, consumed_rate = rate_of(producer), rate_of(consumer) if consumer is not None else 0.0
        revenue_table = (
            read(tables / "revenue_per_minute") if (tables / "revenue_per_minute" / "_delta_log").exists() else None
        )
        spark.stop()
    print("\nsummary")
    print(f"  messages in (acknowledged by the broker): {sent:,}")
    print(f"  messages out (rows in Delta table orders): {consumed:,}")
    print(
        f"  sink throughput (rows / batch time): {produced_rate:,.0f} msgs/s; "
        f"source -> Delta: {consumed_rate:,.0f} msgs/s; whole job {elapsed:.1f} s incl. JVM start"
    )
    print(f"  consumer group '{GROUP}' lag on the broker: {lag}")
    if revenue_table is not None:
        print(f"  revenue per category per minute ({revenue_table.num_rows} rows), first rows:")
        for row in revenue_table.slice(0, 6).to_pylist():
            revenue = f"{row['revenue']:>10.2f}  ({row['orders']} orders)"
            print(f"    {row['window_start']:%H:%M}  {row['category']:<7} {revenue}")
    ok = sent == total and consumed == total and lag == 0
    print("main job OK" if ok else "main job FAILED")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="order events through sparkmq into Delta")
    parser.add_argument("--data-dir", type=Path, default=Path("data/orders-job"))
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=20_000, help="orders per second produced")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--fresh", action="store_true", help="start from an empty data directory")
    args = parser.parse_args(argv)
    if args.fresh and args.data_dir.exists():
        shutil.rmtree(args.data_dir)
    return run(args.data_dir, args.orders, args.rate, args.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
