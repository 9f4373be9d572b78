"""The same Spark jobs through Apache Kafka (KRaft, Spark's own Kafka connector) and through sparkmq.

Run from the repo root (needs `make references`)::

    .venv/bin/python bench/references_spark_bench.py                  # 500,000 rows, 3 repeats
    .venv/bin/python bench/references_spark_bench.py --rows 100000 --repeat 1

One local SparkSession (spark-sql-kafka-0-10 4.2.0 on its classpath), one Kafka 3.9.2 broker + controller
and one sparkmq NameServer + broker (ASYNC flush; Kafka never fsyncs on write), topics of 4 partitions /
queues, BODY-byte random bodies:

- **sink**: a cached DataFrame of N bodies → ``write.format("kafka")`` / ``write.format("sparkmq")``
  (sparkmq's sink is transactional: all or nothing per partition; Kafka's is at-least-once);
- **source**: what the sink wrote → ``readStream.format("kafka")`` / ``readStream.format("sparkmq")``,
  ``maxOffsetsPerTrigger`` 100,000, ``Trigger.AvailableNow`` → ``writeStream.format("noop")``; the rows
  read are checked; the median trigger time is the micro-batch latency column.

Cases alternate Kafka / sparkmq, ``--repeat`` times (the table shows each case's median run;
``--cases source``: the sink still writes, untimed; ``packed``: sparkmq's source again, ``maxPartitions``
Spark's default parallelism); a warm-up round of N/10 rows runs first; each repeat's ratios are printed too
(Kafka and sparkmq ran back to back). CPU seconds come from /proc (JVM, Spark's Python processes, the broker).

``--eos``: exactly-once with a driver killed mid-stream. A driver process of its own (this file with
``--driver``) streams ``EOS_FILES`` text files of ``--eos-rows`` ids, one file a micro-batch, into Kafka's
sink (at-least-once) or sparkmq's (``deliveryGuarantee`` exactly-once); SIGKILL lands in batch
``KILL_BATCH`` as soon as the broker got its first rows (Kafka's partition logs grow; sparkmq's half topic
grows), before Spark commits the batch; the driver starts again
from its checkpoint and finishes. Once the broker's check-backs resolved any orphaned half message, the topic
is read back: duplicates and lost ids. ``--job``: the main job (jobs/orders_pipeline.py) and its Kafka
variant (jobs/orders_pipeline_kafka.py), ``--job-orders`` orders each, whole-job time and rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from spark_common import Meter, Run, compile_package, machine, median_rate, run_stream, table  # noqa: E402

import sparkmq  # noqa: E402
from bench_common import loadavg, temp_root  # noqa: E402
from sparkmq.protocol import RequestCode  # noqa: E402
from sparkmq.remoting import RemotingClient  # noqa: E402
from support.kafka_java import KafkaProcess  # noqa: E402
from support.processes import BrokerProcess, NamesrvProcess  # noqa: E402
from support.rocketmq_java import MAKE_TARGET, missing_references, references_dir  # noqa: E402

PER_TRIGGER = 100_000
SIDES = ("kafka", "sparkmq")
CHECK_BACK = ("--set", "transactionTimeOut=1000", "--set", "transactionCheckInterval=1000")
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
EOS_FILES = 8
KILL_BATCH = 3
CHECK_BACK_SETTLE_S = 5.0  # > the broker's transactionTimeOut + transactionCheckInterval (1 s each, set below)


def spark_with_kafka(jars: list[Path]) -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sparkmq-references-spark-bench")
        .config("spark.jars", ",".join(str(jar) for jar in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sparkmq.register(spark)
    return spark


def bodies(spark: Any, rows: int, body: int) -> Any:
    from pyspark.sql import functions as F

    frame = spark.range(rows, numPartitions=4).select(
        F.expr(f"cast(substring(repeat(uuid(), 4), 1, {body}) as binary)").alias("body")
    )
    frame = frame.cache()
    assert frame.count() == rows
    return frame


def sink(kind: str, frame: Any, target: dict[str, str], topic: str, pid: int, rows: int) -> Run:
    from pyspark.sql import functions as F

    with Meter(frame.sparkSession, pid) as meter:
        if kind == "kafka":
            frame.select(F.col("body").alias("value")).write.format("kafka").option(
                "kafka.bootstrap.servers", target["kafka"]
            ).option("topic", topic).save()
        else:
            frame.select("body", F.lit(topic).alias("topic")).write.format("sparkmq").mode("append").option(
                "namesrvAddr", target["sparkmq"]
            ).save()
    return meter.fill(Run(f"{kind} sink", rows, 0.0))


def source(
    kind: str,
    spark: Any,
    target: dict[str, str],
    topic: str,
    pid: int,
    rows: int,
    checkpoint: Path,
    packed: bool = False,
) -> Run:
    """``packed``: sparkmq's source with ``maxPartitions`` Spark's default parallelism (its cores)."""
    if kind == "kafka":
        frame = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", target["kafka"])
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(PER_TRIGGER))
            .load()
        )
    else:
        frame = (
            spark.readStream.format("sparkmq")
            .option("namesrvAddr", target["sparkmq"])
            .option("topic", topic)
            .option("consumerGroup", f"bench_{topic}" + ("_packed" if packed else ""))
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(PER_TRIGGER))
        )
        if packed:
            frame = frame.option("maxPartitions", str(spark.sparkContext.defaultParallelism))
        frame = frame.load()
    return run_stream(f"{kind} source" + (" packed" if packed else ""), frame, checkpoint, rows, pid)


def eos_driver(kind: str, source_dir: str, target: str, topic: str, checkpoint: str) -> int:
    """``--driver``: the killed-and-restarted streaming query of ``--eos``, until its input is written."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = spark_with_kafka(sorted((references_dir() / "spark-kafka").glob("*.jar")))
    rows = spark.readStream.format("text").option("maxFilesPerTrigger", "1").load(source_dir)
    if kind == "kafka":
        writer = rows.writeStream.format("kafka").option("kafka.bootstrap.servers", target)
    else:
        writer = (
            rows.withColumnRenamed("value", "body")
            .writeStream.format("sparkmq")
            .option("namesrvAddr", target)
            .option("deliveryGuarantee", "exactly-once")
        )
    query = writer.option("topic", topic).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    batches = [(p["batchId"], p["numInputRows"], p["durationMs"].get("triggerExecution")) for p in query.recentProgress]
    print(json.dumps({"batches": batches}))  # (id, rows, ms) of each micro-batch this driver ran
    spark.stop()
    return 0


def appeared(path: Path, deadline_s: float = 300.0) -> float:
    """Poll until ``path`` exists; the time it was seen."""
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} never appeared")
        time.sleep(0.01)
    return time.monotonic()


def kafka_bytes(logs: Path, topic: str) -> Callable[[], int]:
    """The size of ``topic``'s partition logs (Kafka appends what it acknowledges to them at once)."""
    return lambda: sum(log.stat().st_size for log in logs.glob(f"{topic}-*/*.log"))


def half_messages(broker: str) -> Callable[[], int]:
    """How many half messages the broker holds (RMQ_SYS_TRANS_HALF_TOPIC's max offset)."""

    async def ask() -> int:
        client = RemotingClient()
        try:
            fields = {"topic": HALF_TOPIC, "queueId": "0"}
            return int((await client.invoke(broker, RequestCode.GET_MAX_OFFSET, fields)).ext_fields.get("offset", 0))
        finally:
            await client.close()

    return lambda: asyncio.run(ask())


def eos(
    kind: str, spark: Any, target: dict[str, str], root: Path, rows: int, written: Callable[[], int]
) -> dict[str, Any]:
    """The driver killed in batch KILL_BATCH, once the broker got its first rows, and restarted; then the
    topic's duplicates and losses."""
    source, checkpoint, topic = root / "eos-in", root / f"eos-cp-{kind}", f"Eos{kind}"
    if not source.exists():
        source.mkdir()
        for n in range(EOS_FILES):
            ids = range(n * rows // EOS_FILES, (n + 1) * rows // EOS_FILES)
            (source / f"part-{n:03d}.txt").write_text("".join(f"{i}\n" for i in ids))
    command = [sys.executable, __file__, "--driver", kind, str(source), target[kind], topic, str(checkpoint)]
    with (
        (root / f"eos-{kind}-killed.log").open("w") as log,
        subprocess.Popen(command, start_new_session=True, stdout=log, stderr=subprocess.STDOUT) as run,
    ):
        appeared(checkpoint / "commits" / str(KILL_BATCH - 1))
        before = written()
        appeared(checkpoint / "offsets" / str(KILL_BATCH))
        deadline = time.monotonic() + 300
        while written() == before and time.monotonic() < deadline:
            time.sleep(0.005)
        committed_at_kill = (checkpoint / "commits" / str(KILL_BATCH)).exists()
        os.killpg(run.pid, signal.SIGKILL)  # the driver and its JVM
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the restarted {kind} driver failed:\n{done.stderr[-3000:]}")
    restart_s = time.monotonic() - started
    batches = json.loads(done.stdout.splitlines()[-1])["batches"] if done.stdout.strip() else []
    time.sleep(CHECK_BACK_SETTLE_S)  # an orphaned half message of the killed run is resolved by then
    if kind == "kafka":
        read = spark.read.format("kafka").option("kafka.bootstrap.servers", target[kind]).option("subscribe", topic)
        values = read.option("startingOffsets", "earliest").load().selectExpr("cast(value as string) as id")
    else:
        read = spark.read.format("sparkmq").option("namesrvAddr", target[kind]).option("topic", topic)
        values = read.load().selectExpr("cast(body as string) as id")
    total, distinct = values.count(), values.distinct().count()
    return {
        "rows": total,
        "duplicates": total - distinct,
        "lost": rows - distinct,
        "batch_committed_at_kill": committed_at_kill,
        "restart_s": restart_s,
        "restarted_batches": batches,
    }


def jobs(bootstrap: str, root: Path, orders: int) -> str:
    """The main job both ways, Kafka first: each process's wall time (JVM start included) and its summary."""
    commands = {
        "kafka": [
            "jobs.orders_pipeline_kafka",
            "--bootstrap",
            bootstrap,
            "--jars",
            str(references_dir() / "spark-kafka"),
        ],
        "sparkmq": ["jobs.orders_pipeline"],
    }
    lines = []
    for kind, command in commands.items():
        started = time.monotonic()
        args = [sys.executable, "-m", *command, "--data-dir", str(root / f"job-{kind}"), "--orders", str(orders)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=REPO)
        seconds = time.monotonic() - started
        summary = done.stdout[done.stdout.find("summary") :] if "summary" in done.stdout else done.stderr[-2000:]
        lines.append(f"{kind}: exit {done.returncode}, {seconds:.1f} s\n{summary}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--cases", default="sink,source", help="timed, of sink, source, packed (the sources read what the sink wrote)"
    )
    parser.add_argument("--eos", action="store_true", help="the driver-kill exactly-once case instead")
    parser.add_argument("--eos-rows", type=int, default=200_000)
    parser.add_argument("--job", action="store_true", help="the main job written both ways instead")
    parser.add_argument("--job-orders", type=int, default=100_000)
    parser.add_argument("--driver", nargs=5, metavar=("KIND", "INPUT", "TARGET", "TOPIC", "CHECKPOINT"))
    args = parser.parse_args()
    if set(args.cases.split(",")) - {"sink", "source", "packed"}:
        parser.error(f"--cases {args.cases}: any of sink, source, packed")
    if args.driver:
        return eos_driver(*args.driver)
    missing = missing_references("kafka", "spark-kafka")
    if missing:
        print(f"{missing} is missing: run `{MAKE_TARGET}`", file=sys.stderr)
        return 2
    os.environ["PYSPARK_PYTHON"] = sys.executable
    compile_package()
    facts, load_start = machine(), loadavg()
    with (
        temp_root("references-spark-bench-") as root,
        KafkaProcess.start(root) as kafka,
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(root / "store", namesrv.address, "--flush", "async", *CHECK_BACK) as broker,
    ):
        target = {"kafka": kafka.bootstrap, "sparkmq": namesrv.address}
        try:
            if args.job:
                report = jobs(kafka.bootstrap, root, args.job_orders)
            else:
                spark = spark_with_kafka(sorted((references_dir() / "spark-kafka").glob("*.jar")))
                try:
                    if args.eos:
                        kafka.create_topic("Eoskafka")
                        probes = {
                            "kafka": kafka_bytes(root / "kafka" / "logs", "Eoskafka"),
                            "sparkmq": half_messages(broker.address),
                        }
                        report = json.dumps(
                            {kind: eos(kind, spark, target, root, args.eos_rows, probes[kind]) for kind in SIDES}
                        )
                    else:
                        report = throughput(
                            args, spark, kafka, target, {"kafka": kafka.pid, "sparkmq": broker.pid}, root
                        )
                finally:
                    spark.stop()
        except Exception:
            print("Kafka's output:", *kafka.output[-30:], sep="\n", file=sys.stderr)
            raise
    print(f"{facts}; load average {load_start} at the start, {loadavg()} at the end")
    print(report)
    return 0


def throughput(
    args: argparse.Namespace, spark: Any, kafka: KafkaProcess, target: dict[str, str], pids: dict[str, int], root: Path
) -> str:
    """Sink and source rows/s, Kafka and sparkmq alternating; the table and the ratios."""
    runs: list[Run] = []
    for topic in ("Warm", *(f"Bench{n}" for n in range(args.repeat))):
        kafka.create_topic(topic)
    warm = bodies(spark, max(1, args.rows // 10), args.body)
    for kind in SIDES:
        sink(kind, warm, target, "Warm", pids[kind], warm.count())
        source(kind, spark, target, "Warm", pids[kind], warm.count(), root / f"warm-{kind}")
    warm.unpersist()
    frame = bodies(spark, args.rows, args.body)
    cases = args.cases.split(",")
    pairs: list[str] = []
    for n in range(args.repeat):
        rates: dict[str, float] = {}
        for kind in SIDES:
            topic = f"Bench{n}"
            written = sink(kind, frame, target, topic, pids[kind], args.rows)
            timed = [written] if "sink" in cases else []
            if "source" in cases:
                timed.append(source(kind, spark, target, topic, pids[kind], args.rows, root / f"cp-{kind}-{n}"))
            if "packed" in cases and kind == "sparkmq":
                checkpoint = root / f"cp-packed-{n}"
                timed.append(source(kind, spark, target, topic, pids[kind], args.rows, checkpoint, packed=True))
            runs += timed
            rates.update({run.case: run.rate for run in timed})
        pairs.append(
            f"repeat {n + 1}, load {loadavg()}: "
            + ", ".join(
                f"{case} {rates[f'sparkmq {ours}'] / rates[f'kafka {theirs}']:.2f}x"
                for case, ours, theirs in _compared(cases)
            )
        )
    lines = [
        f"{args.rows:,} rows of {args.body} B, {args.repeat} repeats, maxOffsetsPerTrigger {PER_TRIGGER:,}",
        table(runs),
        *pairs,
    ]
    for case, ours, theirs in _compared(cases):
        ratio = median_rate(runs, f"sparkmq {ours}") / median_rate(runs, f"kafka {theirs}")
        lines.append(f"{case}: sparkmq / Kafka rows/s = {ratio:.2f}x (target >= 1.0x)")
    return "\n".join(lines)


def _compared(cases: list[str]) -> list[tuple[str, str, str]]:
    """(case, sparkmq's case name, Kafka's) of each timed case: ``packed`` is compared with Kafka's source."""
    return [(case, "source packed", "source") if case == "packed" else (case, case, case) for case in cases]


if __name__ == "__main__":
    sys.exit(main())
