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

Cases alternate Kafka / sparkmq, ``--repeat`` times (the table shows each case's median run); a warm-up
round of N/10 rows runs first. CPU seconds come from /proc (JVM, Spark's Python processes, the broker).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from spark_common import Meter, Run, compile_package, machine, median_rate, run_stream, table  # noqa: E402

import sparkmq  # noqa: E402
from bench_common import loadavg, temp_root  # noqa: E402
from support.kafka_java import KafkaProcess  # noqa: E402
from support.processes import BrokerProcess, NamesrvProcess  # noqa: E402
from support.rocketmq_java import MAKE_TARGET, missing_references, references_dir  # noqa: E402

PER_TRIGGER = 100_000


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


def source(kind: str, spark: Any, target: dict[str, str], topic: str, pid: int, rows: int, checkpoint: Path) -> Run:
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
            .option("consumerGroup", f"bench_{topic}")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(PER_TRIGGER))
            .load()
        )
    return run_stream(f"{kind} source", frame, checkpoint, rows, pid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    missing = missing_references("kafka", "spark-kafka")
    if missing:
        print(f"{missing} is missing: run `{MAKE_TARGET}`", file=sys.stderr)
        return 2
    os.environ["PYSPARK_PYTHON"] = sys.executable
    compile_package()
    facts, load_start = machine(), loadavg()
    runs: list[Run] = []
    jars = sorted((references_dir() / "spark-kafka").glob("*.jar"))
    with (
        temp_root("references-spark-bench-") as root,
        KafkaProcess.start(root) as kafka,
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(root / "store", namesrv.address, "--flush", "async") as broker,
    ):
        target = {"kafka": kafka.bootstrap, "sparkmq": namesrv.address}
        pids = {"kafka": kafka.pid, "sparkmq": broker.pid}
        for topic in ("Warm", *(f"Bench{n}" for n in range(args.repeat))):
            kafka.create_topic(topic)
        spark = spark_with_kafka(jars)
        try:
            warm = bodies(spark, max(1, args.rows // 10), args.body)
            for kind in ("kafka", "sparkmq"):
                sink(kind, warm, target, "Warm", pids[kind], warm.count())
                source(kind, spark, target, "Warm", pids[kind], warm.count(), root / f"warm-{kind}")
            warm.unpersist()
            frame = bodies(spark, args.rows, args.body)
            for n in range(args.repeat):
                for kind in ("kafka", "sparkmq"):
                    topic = f"Bench{n}"
                    runs.append(sink(kind, frame, target, topic, pids[kind], args.rows))
                    runs.append(source(kind, spark, target, topic, pids[kind], args.rows, root / f"cp-{kind}-{n}"))
        except Exception:
            print("Kafka's output:", *kafka.output[-30:], sep="\n", file=sys.stderr)
            raise
        finally:
            spark.stop()
    print(f"{facts}; load average {load_start} at the start, {loadavg()} at the end")
    print(f"{args.rows:,} rows of {args.body} B, {args.repeat} repeats, maxOffsetsPerTrigger {PER_TRIGGER:,}")
    print(table(runs))
    for case in ("sink", "source"):
        ratio = median_rate(runs, f"sparkmq {case}") / median_rate(runs, f"kafka {case}")
        print(f"{case}: sparkmq / Kafka rows/s = {ratio:.2f}x (target >= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
