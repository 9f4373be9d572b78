"""A Spark batch read of a topic's Delta table against a plain Parquet read of the same rows and columns.

Each ``--shapes`` table is written per ``sparkmq.tables.layout`` with ``deltalake`` (raw columns, 100-byte
bodies, ``--rounds`` rounds each moving every queue's application transaction): ``per-queue`` commits each
queue's rows apart (a file and a commit per queue per round); ``per-cycle`` commits all queues' rows in one
commit as the broker's materializer does (a file per round); ``checkpoint`` adds a checkpoint at the last
version, as the materializer's table configuration and upkeep leave one; ``compacted`` is ``per-cycle``
after the upkeep's compaction and checkpoint; ``spark-written`` holds the ``per-cycle`` rows rewritten by
Spark's own Delta writer (delta-spark), the reference for what Delta's reader costs whoever wrote the table.
The plain Parquet folder of each holds copies of the very data files its snapshot lists, so both reads scan
the same bytes and the ratio is what Delta's log and planning add. Each read is
``spark.read...load(...).write.format("noop")`` (every column decoded, nothing kept), in one Spark session
with ``with_delta``'s settings, Delta and Parquet alternating; the figures are the medians of ``--repeat``
pairs, of wall time and of the JVM's CPU (which moves less with the machine's load), and of the JVM's CPU
of planning the same read alone (``executedPlan``: Delta's includes the Spark job that collects the
snapshot's file list). Target (issue 32): Delta ≥ 0.9× Parquet.

    PYTHONPATH=$PWD .venv/bin/python bench/table_read_bench.py --rows 1000000 --repeat 7
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import REPO, bench_root, commit, cpu_seconds, loadavg

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from sparkmq.tables.layout import RAW_SCHEMA, app_id, table_uri
from sparkmq.tables.spark_delta import missing_jars, with_delta
from sparkmq.tables.upkeep import compact

TOPIC = "orders"
BODY_BYTES = 100


def queue_rows(queue_id: int, start: int, count: int, rng: np.random.Generator) -> pa.Table:
    offsets = np.arange(start, start + count, dtype=np.int64)
    bodies = rng.integers(0, 256, size=count * BODY_BYTES, dtype=np.uint8).tobytes()
    body = pa.Array.from_buffers(
        pa.binary(),
        count,
        [None, pa.py_buffer(np.arange(count + 1, dtype=np.int32) * BODY_BYTES), pa.py_buffer(bodies)],
    )
    stamp = pa.array(np.full(count, time.time_ns() // 1000, dtype=np.int64)).cast(
        RAW_SCHEMA.field("storeTimestamp").type
    )
    keys = pa.array([f"order-{o}" for o in offsets.tolist()])
    properties = pa.MapArray.from_arrays(
        pa.array(np.arange(count + 1, dtype=np.int32) * 2),
        pa.array(["KEYS", "TAGS"] * count),
        pa.array([item for k in keys.to_pylist() for item in (k, "books")]),
    )
    columns = {
        "topic": pa.array([TOPIC] * count),
        "brokerName": pa.array(["broker-a"] * count),
        "queueId": pa.array(np.full(count, queue_id, dtype=np.int32)),
        "queueOffset": pa.array(offsets),
        "msgId": pa.array([f"{queue_id:08X}{o:024X}" for o in offsets.tolist()]),
        "keys": keys,
        "tags": pa.array(["books"] * count),
        "body": body,
        "properties": properties,
        "bornTimestamp": stamp,
        "storeTimestamp": stamp,
    }
    return pa.table([columns[name] for name in RAW_SCHEMA.names], schema=RAW_SCHEMA)


def write_table(uri: str, rows: int, queues: int, rounds: int, shape: str) -> None:
    """``rounds`` cycles of ``rows // rounds`` rows: ``per-queue`` commits each queue's rows apart, ``per-cycle``
    commits all queues' rows in one commit as the materializer does (one file), ``checkpoint`` also leaves a
    checkpoint at the last version as the materializer's upkeep does."""
    rng = np.random.default_rng(7)
    per_commit = rows // (queues * rounds)
    for turn in range(rounds):
        start = turn * per_commit
        parts = [(q, queue_rows(q, start, per_commit, rng)) for q in range(queues)]
        groups = [[part] for part in parts] if shape == "per-queue" else [parts]
        for group in groups:
            write_deltalake(
                uri,
                pa.concat_tables([table for _, table in group]),
                mode="append",
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(app_id(TOPIC, q), start + per_commit) for q, _ in group]
                ),
            )
    if shape == "checkpoint":
        DeltaTable(uri).create_checkpoint()


def copy_data_files(uri: str, folder: Path) -> int:
    folder.mkdir(parents=True)
    files = DeltaTable(uri).file_uris()
    for index, file in enumerate(files):
        shutil.copyfile(file.removeprefix("file://"), folder / f"part-{index:05d}.parquet")
    return len(files)


def timed_read(spark, fmt: str, path: str) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """Wall seconds and the JVM's CPU seconds of one full read (Spark runs no Python for either format), and
    the JVM's CPU seconds of planning it alone."""
    jvm = int(spark.sparkContext._gateway.proc.pid)
    started, cpu = time.perf_counter(), cpu_seconds(jvm)
    spark.read.format(fmt).load(path).write.format("noop").mode("overwrite").save()
    wall, read_cpu = time.perf_counter() - started, cpu_seconds(jvm) - cpu
    cpu = cpu_seconds(jvm)
    spark.read.format(fmt).load(path)._jdf.queryExecution().executedPlan()
    return wall, read_cpu, cpu_seconds(jvm) - cpu


SHAPES = ("per-queue", "per-cycle", "checkpoint", "compacted", "spark-written")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=8, help="materializer cycles (commits per queue)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"a comma list of {', '.join(SHAPES)}")
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    if not set(shapes) <= set(SHAPES):
        parser.error(f"--shapes takes {', '.join(SHAPES)}")
    missing = missing_jars()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    work = Path(tempfile.mkdtemp(prefix="table-read-bench-", dir=bench_root()))
    results: dict[str, tuple[int, int, list[tuple[float, float, float]], list[tuple[float, float, float]]]] = {}
    try:
        spark = (
            with_delta(SparkSession.builder)
            .master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        paths = {}
        for shape in shapes:
            uri = table_uri(str(work / shape / "tables"), TOPIC)
            if shape == "spark-written":
                source = table_uri(str(work / shape / "source"), TOPIC)
                write_table(source, args.rows, args.queues, args.rounds, "per-cycle")
                spark.read.format("delta").load(source).write.format("delta").save(uri)
            else:
                write_table(uri, args.rows, args.queues, args.rounds, "per-cycle" if shape == "compacted" else shape)
            if shape == "compacted":
                compact(uri)
                DeltaTable(uri).create_checkpoint()
            files = copy_data_files(uri, work / shape / "parquet")
            paths[shape] = (uri, str(work / shape / "parquet"))
            results[shape] = (files, DeltaTable(uri).version() + 1, [], [])
        for uri, parquet in paths.values():
            assert spark.read.format("delta").load(uri).count() == spark.read.parquet(parquet).count() == args.rows
            timed_read(spark, "delta", uri), timed_read(spark, "parquet", parquet)  # warm-up
        load = [loadavg()]
        for _ in range(args.repeat):
            for shape, (uri, parquet) in paths.items():
                results[shape][2].append(timed_read(spark, "delta", uri))
                results[shape][3].append(timed_read(spark, "parquet", parquet))
        load.append(loadavg())
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.rows:,} rows, {args.queues} queues, {args.repeat} pairs, load {load[0]} -> {load[-1]}, {commit()}")
    for shape, (files, commits, delta, parquet) in results.items():
        (d, dc, dp), (p, pc, pp) = (
            [statistics.median(run[i] for run in runs) for i in range(3)] for runs in (delta, parquet)
        )
        print(
            f"{shape:<13} {files:3} files {commits:3} commits  delta {d:.3f} s (JVM CPU {dc:.3f}, planning {dp:.3f})  "
            f"parquet {p:.3f} s (JVM CPU {pc:.3f}, planning {pp:.3f})  delta/parquet rate: median {p / d:.2f}x, "
            f"by JVM CPU {pc / dc:.2f}x"
        )
    print("target (issue 32): delta/parquet >= 0.9x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
