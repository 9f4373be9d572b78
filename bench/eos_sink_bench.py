"""The sparkmq sink's two delivery guarantees side by side: at-least-once vs exactly-once.

One NameServer + broker (``--flush async``), one local Spark session (``local[2]``). The same
file-fed streaming query (text files, ``--files-per-trigger`` files per micro-batch,
Trigger.AvailableNow) writes ``--rows`` rows into a fresh 4-queue topic, once per guarantee and
repeat, in alternation. Reported per run: rows/s over the whole query, rows/s in the sink (rows /
the sum of Spark's ``addBatch`` times: the tasks' sends plus the driver's commit), and the median
``addBatch`` time of a micro-batch (the latency the guarantee adds before rows are visible).
Each run checks that the topic then holds exactly ``--rows`` messages; one untimed run of each
guarantee comes first.

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

from bench_common import REPO, bench_root, machine  # noqa: E402 - bench/ is sys.path[0]

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

from sparkmq.connector.broker_view import view_for  # noqa: E402
from tests.support.client_harness import create_topic, wait_for_route  # noqa: E402
from tests.support.processes import BrokerProcess, NamesrvProcess  # noqa: E402

QUEUES = 4
GUARANTEES = ("at-least-once", "exactly-once")


def write_input(directory: Path, rows: int, files: int) -> None:
    directory.mkdir(parents=True)
    per_file = rows // files
    for f in range(files):
        (directory / f"part-{f:04d}.txt").write_text("".join(f"row-{f * per_file + i:09d}-{'x' * 80}\n" for i in range(per_file)))


def run(spark: SparkSession, namesrv: str, broker_address: str, source: Path, root: Path, guarantee: str,
        rows: int, files_per_trigger: int) -> tuple[float, list[float]]:
    topic = f"EosBench_{uuid.uuid4().hex[:8]}"
    create_topic([broker_address], topic, QUEUES)
    wait_for_route(namesrv, topic, {"broker-a"})
    started = time.monotonic()
    query = (spark.readStream.format("text").option("maxFilesPerTrigger", str(files_per_trigger)).load(str(source))
             .withColumnRenamed("value", "body").writeStream.format("sparkmq").option("namesrvAddr", namesrv)
             .option("topic", topic).option("deliveryGuarantee", guarantee)
             .option("checkpointLocation", str(root / f"ck-{topic}")).trigger(availableNow=True).start())
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(*(f"{k}: {v}" for k, v in machine().items()), sep="\n")
    root = Path(tempfile.mkdtemp(prefix="eos-bench-", dir=bench_root()))
    namesrv = NamesrvProcess.start()
    broker = BrokerProcess.start(root / "store", namesrv.address, "--flush", "async")
    spark = (SparkSession.builder.master("local[2]").appName("sparkmq-eos-bench").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        write_input(root / "in", args.rows, args.files)
        for guarantee in GUARANTEES:  # untimed: JVM warm-up, Python workers, the producers' first connections
            run(spark, namesrv.address, broker.address, root / "in", root, guarantee, args.rows, args.files_per_trigger)
        results: dict[str, list[tuple[float, list[float]]]] = {g: [] for g in GUARANTEES}
        for _ in range(args.repeat):
            for guarantee in GUARANTEES:
                results[guarantee].append(run(spark, namesrv.address, broker.address, root / "in", root, guarantee,
                                              args.rows, args.files_per_trigger))
        batch_rows = args.rows // args.files * args.files_per_trigger
        print(f"\n{args.rows} rows, {batch_rows} rows per micro-batch, {args.repeat} run(s) each\n")
        print("| guarantee | query rows/s (runs) | sink rows/s: rows / Σ addBatch (runs) "
              "| median addBatch per micro-batch (s) |")
        print("|---|---|---|---|")
        for guarantee, runs in results.items():
            rates = ", ".join(f"{rate:,.0f}" for rate, _ in runs)
            median_batch = statistics.median(d for _, batches in runs for d in batches)
            sink = ", ".join(f"{args.rows / sum(batches):,.0f}" for _, batches in runs)
            print(f"| {guarantee} | {rates} | {sink} | {median_batch:.2f} |")
    finally:
        spark.stop()
        broker.stop()
        namesrv.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
