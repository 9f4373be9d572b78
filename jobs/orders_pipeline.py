"""The main job: order events through sparkmq into Delta tables, exactly once, end to end.

1. An embedded NameServer + Broker start with their store under ``data/``.
2. A Spark streaming query turns the ``rate`` source into order events (JSON bodies, the
   category as tag, the order id as key) and writes them through the ``sparkmq`` sink.
3. A second streaming query reads the topic through the ``sparkmq`` source under a consumer
   group, appends the orders to a Delta table exactly once (Spark's Delta writer, idempotent
   through the batch id), and adds each batch's revenue per category per minute into a second Delta
   table (exactly once too).
4. It prints progress while it runs, then a summary: messages in and out, throughput, and
   the group's lag read from the broker (0 at the end).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.delta_sink import append_once, exists, overwrite_once, read, row_count, sorted_rows
from sparkmq import Admin, EmbeddedCluster
from sparkmq.tables.spark_delta import with_delta

if TYPE_CHECKING:  # the functions below import pyspark where they need it
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

TOPIC = "orders"
GROUP = "orders-to-delta"
DELTA_APP_ID = "sparkmq-orders-to-delta"  # the Delta application transaction id of the landing query
CATEGORIES = ["books", "games", "music", "garden"]
ORDER_SCHEMA = "order_id long, ordered_at timestamp, category string, amount double"
# A landing query that fails (a Python worker of Spark's that did not connect back within its 10 s on a busy
# machine) starts again from its checkpoint this many times: its offsets and Delta's txn keep it exactly once.
RESTARTS = 2


def spark_session(jars: Sequence[Path] = ()) -> SparkSession:
    """The job's local Spark session with Delta Lake; ``jars``: extra connector jars on its classpath."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("sparkmq-orders")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    spark = with_delta(builder, jars).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def order_messages(spark: SparkSession, total: int, rate: int) -> DataFrame:
    """``total`` sample orders from the ``rate`` source: JSON ``body``, category ``tags``, order id ``keys``."""
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
    return orders.select(
        F.to_json(F.struct("order_id", "ordered_at", "category", "amount")).alias("body"),
        F.col("category").alias("tags"),
        F.concat(F.lit("order-"), F.col("order_id").cast("string")).alias("keys"),
    )


def start_producer(spark: SparkSession, namesrv: str, total: int, rate: int, checkpoint: Path) -> StreamingQuery:
    """A stream of ``total`` sample orders into the topic through the sparkmq sink."""
    options = {"namesrvAddr": namesrv, "topic": TOPIC}
    return stream_into(order_messages(spark, total, rate), "sparkmq", options, checkpoint)


def stream_into(frame: DataFrame, sink: str, options: dict[str, str], checkpoint: Path) -> StreamingQuery:
    """``frame`` written by the sink ``sink`` with ``options``, a micro-batch a second."""
    writer = frame.writeStream.format(sink).options(**options).option("checkpointLocation", str(checkpoint))
    return writer.trigger(processingTime="1 second").start()


def start_consumer(spark: SparkSession, namesrv: str, tables: Path, checkpoint: Path) -> StreamingQuery:
    """Read the topic under GROUP and land it in Delta: raw orders (exactly once) + revenue."""
    options = {
        "namesrvAddr": namesrv,
        "topic": TOPIC,
        "consumerGroup": GROUP,
        "startingOffsets": "earliest",
        "maxPartitions": str(spark.sparkContext.defaultParallelism),  # one task per core, not per queue
    }
    source = spark.readStream.format("sparkmq").options(**options).load()
    return land_in_delta(source, "body", ["queueId", "queueOffset"], tables, checkpoint, DELTA_APP_ID)


def land_in_delta(
    source: DataFrame, body: str, position: list[str], tables: Path, checkpoint: Path, app_id: str
) -> StreamingQuery:
    """Orders parsed from the JSON column ``body`` appended to Delta table ``orders`` once per micro-batch (with
    the ``position`` columns), and their revenue per minute added into ``revenue_per_minute`` once per batch."""
    from pyspark.sql import functions as F

    orders = source.select(F.from_json(F.col(body).cast("string"), ORDER_SCHEMA).alias("o"), *position).select(
        "o.*", *position
    )

    def land(batch: DataFrame, batch_id: int) -> None:
        batch.persist()  # read from the source once: appended, then aggregated
        try:
            append_once(batch, tables / "orders", app_id, batch_id)
            add_revenue(revenue(batch), tables / "revenue_per_minute", app_id, batch_id)
        finally:
            batch.unpersist()

    return (
        orders.writeStream.foreachBatch(land)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="2 seconds")
        .start()
    )


def revenue(orders: DataFrame) -> DataFrame:
    """Revenue and order count per category per minute window (unordered: readers sort)."""
    from pyspark.sql import functions as F

    return orders.groupBy(F.date_trunc("minute", "ordered_at").alias("window_start"), "category").agg(
        F.sum("amount").alias("revenue"), F.count("amount").alias("orders")
    )


def add_revenue(batch_revenue: DataFrame, table: Path, app_id: str, batch_id: int) -> None:
    """The table's revenue rows with a micro-batch's added (``revenue`` of its orders), written as that batch:
    a replayed batch already added is skipped by Delta's txn, so the table stays the revenue of the orders
    table, and a batch costs its own rows, not a read of every order landed before."""
    from pyspark.sql import functions as F

    if exists(table):
        batch_revenue = (
            read(batch_revenue.sparkSession, table)
            .unionByName(batch_revenue)
            .groupBy("window_start", "category")
            .agg(F.sum("revenue").alias("revenue"), F.sum("orders").alias("orders"))
        )
    overwrite_once(batch_revenue, table, app_id, batch_id)


def stop_if_idle(query: StreamingQuery) -> None:
    """Stop ``query`` if no micro-batch runs now (a later call tries again): no batch is interrupted."""
    if query.isActive and not query.status["isTriggerActive"]:
        query.stop()


def stop_between_batches(query: StreamingQuery, wait_s: float = 10.0) -> None:
    """Stop ``query`` while no micro-batch runs (the rate source keeps triggering empty batches after the
    last order): stopping mid-batch interrupts its tasks, and Spark logs that batch as aborted."""
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


def stop_and_rates(producer: StreamingQuery, consumer: StreamingQuery | None) -> tuple[float, float]:
    """Stop both queries between micro-batches; their rows/s (``rate_of``)."""
    stop_between_batches(producer)
    if consumer is not None:
        stop_between_batches(consumer)
    return rate_of(producer), rate_of(consumer) if consumer is not None else 0.0


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
        restarts = 0
        try:
            while time.monotonic() - started < timeout_s:
                time.sleep(2)
                try:
                    lags = admin.consumer_lag(GROUP, TOPIC)
                except Exception as exc:  # the topic appears with the first acknowledged batch
                    print(f"  waiting for the first orders ({type(exc).__name__})")
                    continue
                if consumer is None or (not consumer.isActive and restarts < RESTARTS):
                    if consumer is not None:
                        restarts += 1
                        cause = str(consumer.exception()).splitlines()[0]
                        print(f"  the landing query stopped ({cause}); starting it again from its checkpoint")
                    consumer = start_consumer(spark, cluster.namesrv_address, tables, checkpoints / "consumer")
                elif not consumer.isActive:
                    raise RuntimeError(f"the landing query stopped: {consumer.exception()}")
                sent = sum(q.broker_offset for q in lags)
                if sent >= total:
                    stop_if_idle(producer)  # the rate source's later rows are all past the last order
                lag = sum(q.lag for q in lags)
                consumed = row_count(tables / "orders") if exists(tables / "orders") else 0
                print(
                    f"  {time.monotonic() - started:5.1f}s  sent {sent:>7,}  in Delta {consumed:>7,}  group lag {lag:,}"
                )
                if sent >= total and lag == 0 and consumed >= total:
                    break
        finally:
            produced_rate, consumed_rate = stop_and_rates(producer, consumer)
        elapsed = time.monotonic() - started
        spark.stop()
    revenue_table = tables / "revenue_per_minute"
    revenue_rows = sorted_rows(revenue_table, ["window_start", "category"]) if exists(revenue_table) else None
    print_summary("acknowledged by the broker", sent, consumed, produced_rate, consumed_rate, elapsed)
    print(f"  consumer group '{GROUP}' lag on the broker: {lag}")
    if revenue_rows is not None:
        print(f"  revenue per category per minute ({len(revenue_rows)} rows), first rows:")
        for row in revenue_rows[:6]:
            revenue = f"{row['revenue']:>10.2f}  ({row['orders']} orders)"
            print(f"    {row['window_start']:%H:%M}  {row['category']:<7} {revenue}")
    ok = sent == total and consumed == total and lag == 0
    print("main job OK" if ok else "main job FAILED")
    return 0 if ok else 1


def print_summary(
    sent_by: str, sent: int, consumed: int, produced_rate: float, consumed_rate: float, elapsed: float
) -> None:
    print("\nsummary")
    print(f"  messages in ({sent_by}): {sent:,}")
    print(f"  messages out (rows in Delta table orders): {consumed:,}")
    print(
        f"  sink throughput (rows / batch time): {produced_rate:,.0f} msgs/s; "
        f"source -> Delta: {consumed_rate:,.0f} msgs/s; whole job {elapsed:.1f} s incl. JVM start"
    )


def parse_job_arguments(parser: argparse.ArgumentParser, argv: list[str] | None, data_dir: str) -> argparse.Namespace:
    """``parser`` with the options every variant of the job takes, parsed; ``--fresh`` already applied."""
    parser.add_argument("--data-dir", type=Path, default=Path(data_dir))
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=20_000, help="orders per second produced")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--fresh", action="store_true", help="start from an empty data directory")
    args = parser.parse_args(argv)
    if args.fresh and args.data_dir.exists():
        shutil.rmtree(args.data_dir)
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="order events through sparkmq into Delta")
    args = parse_job_arguments(parser, argv, "data/orders-job")
    return run(args.data_dir, args.orders, args.rate, args.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
