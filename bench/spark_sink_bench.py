"""Spark sink benchmark: ``df.write.format("sparkmq")`` beside ``AsyncProducer.send_batch`` into the same broker.

Run from the repo root::

    .venv/bin/python bench/spark_sink_bench.py                # 1,000,000 rows, 3 repeats
    .venv/bin/python bench/spark_sink_bench.py --quick        # 100,000 rows, 1 repeat (smoke run)
    .venv/bin/python bench/spark_sink_bench.py --profile bench-profiles   # + py-spy of the Python workers

What it does (results in docs/benchmarks.md, Spark section): starts ``sparkmq namesrv`` and ``sparkmq
broker --flush async``, writes N rows of 100 random bytes as Parquet, and then, interleaved,
``--repeat`` times each:

* **sink**: a cached DataFrame of the N rows (``body`` binary, ``topic``) written with
  ``df.write.format("sparkmq").mode("append")``; the broker's max offsets must sum to N;
* **produce**: the same N bodies (``TagA``, ``KEYS`` set) sent by ``AsyncProducer.send_batch`` (256 per
  batch, 16 batches in flight) from this process: the baseline the sink is held against.

Reported: rows/s (wall), CPU seconds of the JVM, Spark's Python processes and the broker, and the
sink's rows/s over the produce baseline's in the same run. After them, the CPU cost of the sink's bulk
encoding (``encode_rows``) per row outside Spark.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from spark_common import (
    BODY_BYTES,
    Meter,
    Run,
    WorkerProfiler,
    jvm_pid,
    median_rate,
    produce,
    spark_bench,
    spark_session,
)

from bench_common import loadavg
from sparkmq.connector.broker_view import view_for

SINK = "sink: df.write sparkmq"
PRODUCE = "produce: AsyncProducer.send_batch 256, 16 in flight"
CASES = {"sink": SINK, "produce": PRODUCE}


def write_bodies(path: Path, rows: int) -> None:
    pool = [os.urandom(BODY_BYTES) for _ in range(1024)]
    pq.write_table(pa.table({"body": pa.array([pool[i % 1024] for i in range(rows)], pa.binary())}), path)


def run_sink(spark: Any, namesrv: str, bodies_dir: Path, topic: str, rows: int, broker_pid: int) -> Run:
    """``df.write.format("sparkmq")`` of a cached (body, topic) DataFrame; checks the broker's offsets."""
    from pyspark.sql import functions as F

    frame = spark.read.parquet(str(bodies_dir)).select("body", F.lit(topic).alias("topic"))
    frame = frame.repartition(spark.sparkContext.defaultParallelism).cache()
    assert frame.count() == rows
    with Meter(spark, broker_pid) as meter:
        frame.write.format("sparkmq").mode("append").option("namesrvAddr", namesrv).save()
    run = meter.fill(Run(SINK, rows, 0.0, note=f"{frame.rdd.getNumPartitions()} partitions"))
    frame.unpersist()
    view = view_for(namesrv, "bench-sink-check")
    stored = sum(view.max_offsets(view.queues([topic])).values())
    if stored != rows:
        raise RuntimeError(f"sink: the broker holds {stored} messages of {topic}, expected {rows}")
    return run


def sink_rows_cost(batch: pa.RecordBatch, topic: str) -> float:
    """Microseconds per row of the sink's bulk encoding (``encode_rows``), outside Spark."""
    from sparkmq.connector.batch_body import BulkIds, encode_rows

    table = pa.RecordBatch.from_arrays([batch.column("body"), pa.array([topic] * batch.num_rows)], ["body", "topic"])
    started = time.process_time()
    encode_rows(table, BulkIds())
    return (time.process_time() - started) / batch.num_rows * 1e6


def sink_rows_cost_of(rows: int) -> float:
    pool = [os.urandom(BODY_BYTES) for _ in range(1024)]
    return sink_rows_cost(
        pa.RecordBatch.from_arrays([pa.array([pool[i % 1024] for i in range(rows)], pa.binary())], ["body"]),
        "SparkBenchSink",
    )


def run_case(case: str, spark: Any, namesrv: str, broker_pid: int, bodies: Path, rows: int, number: int) -> Run:
    if case == PRODUCE:
        with Meter(spark, broker_pid) as meter:
            asyncio.run(produce(namesrv, f"SparkBenchProduce{number}", rows))
        return meter.fill(Run(PRODUCE, rows, 0.0, note="Python CPU: Spark's only (the producer is this process)"))
    return run_sink(spark, namesrv, bodies, f"SparkBenchSink{number}", rows, broker_pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="100,000 rows, one repeat")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each case, interleaved (default 3)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy the Python workers during one more sink write"
    )
    args = parser.parse_args(argv)
    n, repeat = (100_000, 1) if args.quick else (args.messages, args.repeat)
    with spark_bench("sink") as bench:
        root, namesrv, broker, runs = bench.root, bench.namesrv, bench.broker, bench.runs
        write_bodies(root / "warm.parquet", max(n // 5, 8_000))
        write_bodies(root / "main.parquet", n)
        spark = bench.spark = spark_session(args.master)
        number = 0
        for case in (SINK, PRODUCE, SINK, PRODUCE):  # warm-up: JVM, JIT, Python workers, connections
            number += 1
            run_case(case, spark, namesrv.address, broker.pid, root / "warm.parquet", max(n // 5, 8_000), number)
        for rep in range(repeat):
            for case in (SINK, PRODUCE):
                number += 1
                runs.append(run_case(case, spark, namesrv.address, broker.pid, root / "main.parquet", n, number))
            print(
                f"  repeat {rep}: "
                + ", ".join(f"{r.case.split(':')[0]} {r.rate:,.0f}" for r in runs[-2:])
                + f" rows/s; load average {loadavg()}",
                file=sys.stderr,
                flush=True,
            )
        bench.load_end = loadavg()
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            spy = WorkerProfiler(args.profile / "sink", jvm_pid(spark))
            run_case(SINK, spark, namesrv.address, broker.pid, root / "main.parquet", n, number + 1)
            bench.profile = "## Python workers during one more sink write (not timed)\n" + spy.stop()
        sink_cpu = sorted(r.cpu for r in runs if r.case == SINK)[(repeat - 1) // 2]
        produce_cpu = sorted(r.cpu for r in runs if r.case == PRODUCE)[(repeat - 1) // 2]
        bench.notes.append(
            f"sink rows/s relative to {PRODUCE} in this run: "
            f"{median_rate(runs, SINK) / median_rate(runs, PRODUCE):.2f}x (target: ≥ 1.0x); "
            f"median CPU-s (JVM + Spark's Python + broker; the producer's own CPU is not counted): "
            f"sink {sink_cpu:.2f}, produce {produce_cpu:.2f}"
        )
        bench.notes.append(
            f"sink encode_rows (bulk SEND_BATCH items, outside Spark): {sink_rows_cost_of(4096):.2f} CPU-µs/row"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
