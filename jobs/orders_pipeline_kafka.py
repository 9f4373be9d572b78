"""The main job written for Apache Kafka: the same orders, through Kafka and Spark's Kafka connector, into Delta.

The pipeline of :mod:`jobs.orders_pipeline` with Kafka in place of sparkmq: the ``rate`` source's orders go
through ``writeStream.format("kafka")`` (body as the record value, order key as its key) into topic
``orders`` of a running Kafka; a second query reads it with ``readStream.format("kafka")`` and lands it in
the same two Delta tables, exactly once per micro-batch. Kafka keeps no offsets for Spark's reader (they
live in the checkpoint), so the job ends when the Delta table holds every order.

    .venv/bin/python -m jobs.orders_pipeline_kafka --bootstrap 127.0.0.1:9092 \\
        --jars ~/.cache/sparkmq/references/spark-kafka --fresh
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.delta_sink import exists, row_count
from jobs.orders_pipeline import (
    TOPIC,
    land_in_delta,
    order_messages,
    parse_job_arguments,
    print_summary,
    spark_session,
    stop_and_rates,
    stop_if_idle,
    stream_into,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

DELTA_APP_ID = "kafka-orders-to-delta"


def start_producer(spark: SparkSession, bootstrap: str, total: int, rate: int, checkpoint: Path) -> StreamingQuery:
    """A stream of ``total`` sample orders into the topic through Spark's Kafka sink."""
    messages = order_messages(spark, total, rate).selectExpr("body AS value", "keys AS key")
    return stream_into(messages, "kafka", {"kafka.bootstrap.servers": bootstrap, "topic": TOPIC}, checkpoint)


def start_consumer(spark: SparkSession, bootstrap: str, tables: Path, checkpoint: Path) -> StreamingQuery:
    """Read the topic from its start and land it in Delta: raw orders (exactly once) + revenue."""
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC, "startingOffsets": "earliest"}
    source = spark.readStream.format("kafka").options(**options).load()
    return land_in_delta(source, "value", ["partition", "offset"], tables, checkpoint, DELTA_APP_ID)


def records_in(spark: SparkSession, bootstrap: str) -> int:
    """The records of the topic, read once from its start (what the sink wrote)."""
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC, "startingOffsets": "earliest"}
    return int(spark.read.format("kafka").options(**options).load().count())


def landed(query: StreamingQuery | None) -> int:
    """Rows of the micro-batches ``query`` finished (the orders appended and the revenue recomputed)."""
    return sum(p["numInputRows"] for p in query.recentProgress) if query is not None else 0


def run(bootstrap: str, jars: list[Path], data_dir: Path, total: int, rate: int, timeout_s: float) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    tables, checkpoints = data_dir / "delta", data_dir / "checkpoints"
    started = time.monotonic()
    spark = spark_session(jars)
    producer = start_producer(spark, bootstrap, total, rate, checkpoints / "producer")
    consumer = None
    consumed = 0
    try:
        while time.monotonic() - started < timeout_s:
            time.sleep(2)
            written = sum(max(p["sink"]["numOutputRows"], 0) for p in producer.recentProgress)
            if written >= total:
                stop_if_idle(producer)  # the rate source's later rows are all past the last order
            if consumer is None and written:
                consumer = start_consumer(spark, bootstrap, tables, checkpoints / "consumer")
            consumed = row_count(tables / "orders") if exists(tables / "orders") else 0
            print(f"  {time.monotonic() - started:5.1f}s  in Delta {consumed:>7,}")
            if consumed >= total and landed(consumer) >= total:  # the batch also recomputed the revenue table
                break
    finally:
        produced_rate, consumed_rate = stop_and_rates(producer, consumer)
    elapsed = time.monotonic() - started
    sent = records_in(spark, bootstrap)
    spark.stop()
    print_summary("records in the Kafka topic", sent, consumed, produced_rate, consumed_rate, elapsed)
    ok = sent == total and consumed == total
    print("main job OK" if ok else "main job FAILED")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="order events through Kafka into Delta")
    parser.add_argument("--bootstrap", required=True, help="the Kafka bootstrap servers")
    parser.add_argument("--jars", type=Path, required=True, help="a folder of spark-sql-kafka and its dependencies")
    args = parse_job_arguments(parser, argv, "data/orders-job-kafka")
    jars = sorted(args.jars.glob("*.jar"))
    return run(args.bootstrap, jars, args.data_dir, args.orders, args.rate, args.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
