"""The sparkmq sink's two delivery guarantees side by side: at-least-once vs exactly-once.

One NameServer + broker (``--flush async``), one local Spark session (``local[2]``). The same
file-fed streaming query (text files, ``--files-per-trigger`` files per micro-batch,
Trigger.AvailableNow) writes ``--rows`` rows into a fresh 4-queue topic, once per guarantee and
repeat, in alternation. Reported per run: rows/s over the whole query, rows/s in the sink (rows /
the sum of Spark's ``addBatch`` times: the tasks' sends plus the driver's commit), and the median
``addBatch`` time of a micro-batch (the latency the guarantee adds before rows are visible).
Each run checks that the topic then holds exactly ``--rows`` messages; one untimed run of each
guarantee comes first. Then, outside Spark, the exactly-once pieces on ``--piece-rows`` rows: a
task's half messages (``write_halves``) and the driver's commit (``settle``: marker + ENDs), each
with its wall time and the CPU seconds of the broker and of this process.

    .venv/bin/python bench/eos_sink_bench.py --rows 100000 --repeat 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench_common import REPO, bench_root, cpu_seconds, machine  # noqa: E402 - bench/ is sys.path[0]

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession

from sparkmq.connector.broker_view import view_for
from tests.support.client_harness import create_topic, wait_for_route
from tests.support.processes import BrokerProcess, NamesrvProcess

QUEUES = 4
GUARANTEES = ("at-least-once", "exactly-once")


def write_input(directory: Path, rows: int, files: int) -> None:
    directory.mkdir(parents=True)
    per_file = rows // files
    for f in range(files):
        (directory / f"part-{f:04d}.txt").write_text(
            "".join(f"row-{f * per_file + i:09d}-{'x' * 80}\n" for i in range(per_file))
        )


def run(
    spark: SparkSession,
    namesrv: str,
    broker_address: str,
    source: Path,
    root: Path,
    guarantee: str,
    rows: int,
    files_per_trigger: int,
) -> tuple[float, list[float]]:
    topic = f"EosBench_{uuid.uuid4().hex[:8]}"
    create_topic([broker_address], topic, QUEUES)
    wait_for_route(namesrv, topic, {"broker-a"})
    started = time.monotonic()
    query = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", str(files_per_trigger))
        .load(str(source))
        .withColumnRenamed("value", "body")
        .writeStream.format("sparkmq")
        .option("namesrvAddr", namesrv)
        .option("topic", topic)
        .option("deliveryGuarantee", guarantee)
        .option("checkpointLocation", str(root / f"ck-{topic}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"{guarantee}: {query.exception()}")
    view = view_for(namesrv, "eos-bench-check")
    stored = sum(view.max_offsets(view.queues([topic])).values())
    if stored != rows:
        raise RuntimeError(f"{guarantee}: the topic holds {stored} messages, expected {rows}")
    add_batch = [p["durationMs"].get("addBatch", 0) / 1000 for p in query.recentProgress if p["numInputRows"]]
    return rows / seconds, add_batch


def pieces(namesrv: str, broker_address: str, broker_pid: int, rows: int) -> str:
    """The exactly-once writer's two steps outside Spark, on ``rows`` rows in Arrow batches of 1,000."""
    import pyarrow as pa

    from sparkmq.connector.sink_options import SinkOptions
    from sparkmq.connector.sink_send import place_runs
    from sparkmq.connector.transactional_writer import close_clients, settle, write_halves

    topic = f"EosPieces_{uuid.uuid4().hex[:8]}"
    create_topic([broker_address], topic, QUEUES)
    wait_for_route(namesrv, topic, {"broker-a"})
    options, query = SinkOptions(namesrv, topic), f"pieces-{uuid.uuid4().hex[:8]}"
    bodies = [f"row-{i:09d}-{'x' * 80}".encode() for i in range(rows)]
    batches = [
        pa.RecordBatch.from_pydict({"body": pa.array(bodies[i : i + 1000], pa.binary())}) for i in range(0, rows, 1000)
    ]
    write_halves(options, query, 0, iter(batches[:1]), place_runs)  # untimed: the producer's start, first routes
    marks = [(time.monotonic(), cpu_seconds(broker_pid), time.process_time())]
    done = write_halves(options, query, 1, iter(batches), place_runs)
    marks.append((time.monotonic(), cpu_seconds(broker_pid), time.process_time()))
    committed, _rolled_back = settle(options, query, 1, [done], decide=True)
    marks.append((time.monotonic(), cpu_seconds(broker_pid), time.process_time()))
    close_clients(namesrv)
    assert committed == rows, committed
    halves = sum(len(h) for h in done.halves.values())
    steps = [
        f"{name}: {b[0] - a[0]:.2f} s wall, broker {b[1] - a[1]:.2f} CPU-s, this process {b[2] - a[2]:.2f} CPU-s"
        for name, a, b in zip(("write_halves", "settle (marker + ENDs)"), marks, marks[1:], strict=False)
    ]
    return f"{rows} rows in {halves} batch half messages; " + "; ".join(steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--piece-rows", type=int, default=4000, help="rows of the pieces outside Spark (0: skip)")
    args = parser.parse_args()
    print(*(f"{k}: {v}" for k, v in machine().items()), sep="\n")
    root = Path(tempfile.mkdtemp(prefix="eos-bench-", dir=bench_root()))
    namesrv = NamesrvProcess.start()
    broker = BrokerProcess.start(root / "store", namesrv.address, "--flush", "async")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sparkmq-eos-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        write_input(root / "in", args.rows, args.files)
        for guarantee in GUARANTEES:  # untimed: JVM warm-up, Python workers, the producers' first connections
            run(spark, namesrv.address, broker.address, root / "in", root, guarantee, args.rows, args.files_per_trigger)
        results: dict[str, list[tuple[float, list[float]]]] = {g: [] for g in GUARANTEES}
        for _ in range(args.repeat):
            for guarantee in GUARANTEES:
                results[guarantee].append(
                    run(
                        spark,
                        namesrv.address,
                        broker.address,
                        root / "in",
                        root,
                        guarantee,
                        args.rows,
                        args.files_per_trigger,
                    )
                )
        batch_rows = args.rows // args.files * args.files_per_trigger
        print(f"\n{args.rows} rows, {batch_rows} rows per micro-batch, {args.repeat} run(s) each\n")
        print(
            "| guarantee | query rows/s (runs) | sink rows/s: rows / Σ addBatch (runs) "
            "| median addBatch per micro-batch (s) |"
        )
        print("|---|---|---|---|")
        for guarantee, runs in results.items():
            rates = ", ".join(f"{rate:,.0f}" for rate, _ in runs)
            median_batch = statistics.median(d for _, batches in runs for d in batches)
            sink = ", ".join(f"{args.rows / sum(batches):,.0f}" for _, batches in runs)
            print(f"| {guarantee} | {rates} | {sink} | {median_batch:.2f} |")
        if args.piece_rows:
            print("\nexactly-once outside Spark:", pieces(namesrv.address, broker.address, broker.pid, args.piece_rows))
    finally:
        spark.stop()
        broker.stop()
        namesrv.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
