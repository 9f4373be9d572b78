"""Spark source benchmark: ``readStream.format("sparkmq")`` beside Parquet and a trivial Python Arrow source.

Run from the repo root::

    .venv/bin/python bench/spark_source_bench.py                 # 1,000,000 messages, 3 repeats (~8 min on 2 vCPUs)
    .venv/bin/python bench/spark_source_bench.py --quick         # 100,000 messages, 1 repeat (smoke run)
    .venv/bin/python bench/spark_source_bench.py --cases source,parquet4 --repeat 5
    .venv/bin/python bench/spark_source_bench.py --profile bench-profiles   # + py-spy of the Python workers

What it does (results in docs/benchmarks.md, Spark section):

1. Starts ``sparkmq namesrv`` and ``sparkmq broker --flush async`` and produces N messages of 100
   random bytes (``KEYS`` and ``TAGS`` set, as a Java producer would) into a topic of 4 queues.
2. Pulls them back once, outside Spark (``BrokerView.read_range`` + ``records_to_arrow``), timing the
   two apart, and writes the source's default (lean, 10-column) RecordBatches (and their ``topic,
   queueId, queueOffset, body`` columns) as Parquet (16 files) and Arrow files.
3. Warms up: every case runs twice on N/5 rows of its own (JVM start, JIT, first Python workers).
4. Timed cases, interleaved, ``--repeat`` times each (the table shows the median run):

   * **source**: ``readStream.format("sparkmq")`` (earliest, ``maxOffsetsPerTrigger`` 250,000, a
     fresh consumer group) → ``writeStream.format("noop")``, ``Trigger.AvailableNow``;
   * **sourcenet**: the same with ``localReads=false``: every record pulled over the broker's sockets
     (the source's path whenever it does not run on the broker's host; **source** reads the broker's
     store files itself when it does, connector/local_reads.py);
   * **parquet4** / **parquetlean**: ``readStream.format("parquet")`` of the 4- / 10-column files,
     ``maxFilesPerTrigger`` sized to 250,000-row batches → noop, AvailableNow;
   * **arrowlean** / **arrow4**: a trivial Python streaming data source (defined here) yielding slices
     of the Arrow file (as many partitions per batch as the source, 4096-row RecordBatches, like the
     real source): Spark's own cost of a Python Arrow source with that schema, no broker, no decoding.

   The Python cases plan ``--partitions`` partitions per micro-batch (default: Spark's
   defaultParallelism, as Parquet's file packing does): the source with ``maxPartitions`` (its 4
   queues' ranges packed), the trivial source in as many row ranges. ``source:4,arrowlean:4`` runs a
   case with its own count (4 = one per queue, the source's default without ``maxPartitions``).
   Besides the whole-query ratios (the headline) the bench prints per-trigger ratios (the steady
   state, without the per-query start), labelled as such.

   rows/s is N over the wall time from ``start()`` to the end of ``awaitTermination()``. CPU seconds
   are read from /proc for the JVM, Spark's Python processes and the broker: on a shared machine the
   CPU ratios are the steadier comparison.
5. Pieces: ``records_to_arrow`` (the C lean path the source takes, and the numpy reference) and the
   reference's parts on one 4096-record pull, in CPU milliseconds.

``--profile DIR`` then runs py-spy on the PySpark daemon and the broker during one more (untimed) source run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
from spark_common import (
    QUEUES,
    Run,
    WorkerProfiler,
    jvm_pid,
    median_cpu,
    median_rate,
    produce,
    run_stream,
    spark_bench,
    spark_session,
)

from bench_common import loadavg
from sparkmq.connector import arrow as sm_arrow
from sparkmq.connector.broker_view import view_for
from sparkmq.connector.columns import SCHEMA_DDL, source_columns
from sparkmq.message.bulk import decode_columns

PARQUET_FILES = 16


# -- a trivial Python Arrow source (the ceiling for any Python source of this schema) ------
@dataclass(frozen=True)
class RowRange(InputPartition):
    start: int
    end: int


class IpcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, path: str, per_trigger: int, partitions: int) -> None:
        import pyarrow as pa

        self.path, self.per_trigger, self.parts = path, per_trigger, partitions
        with pa.memory_map(path) as source:
            self.total = pa.ipc.open_file(source).read_all().num_rows

    def initialOffset(self) -> dict[str, int]:
        return {"row": 0}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        step = limit.max_rows if isinstance(limit, ReadMaxRows) else self.total
        return {"row": min(start["row"] + step, self.total)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[RowRange]:
        edges = np.linspace(start["row"], end["row"], self.parts + 1).astype(int).tolist()
        return [RowRange(a, b) for a, b in pairwise(edges) if b > a]

    def read(self, partition: RowRange) -> Any:
        import pyarrow as pa

        with pa.memory_map(self.path) as source:
            table = pa.ipc.open_file(source).read_all().slice(partition.start, partition.end - partition.start)
            yield from table.to_batches(max_chunksize=4096)

    def commit(self, end: dict[str, int]) -> None:
        pass


class IpcDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "benchipc"

    def schema(self) -> str:
        return self.options["ddl"]

    def streamReader(self, schema: Any) -> IpcStreamReader:
        return IpcStreamReader(self.options["path"], int(self.options["pertrigger"]), int(self.options["partitions"]))


def source_frame(
    spark: Any, namesrv: str, topic: str, group: str, per_trigger: int, partitions: int, local: bool = True
) -> Any:
    frame = (
        spark.readStream.format("sparkmq")
        .option("localReads", str(local).lower())
        .option("namesrvAddr", namesrv)
        .option("topic", topic)
        .option("consumerGroup", group)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
    )
    return (frame.option("maxPartitions", str(partitions)) if partitions < QUEUES else frame).load()


def parquet_frame(spark: Any, directory: Path, files_per_trigger: int) -> Any:
    schema = spark.read.parquet(str(directory)).schema
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", str(files_per_trigger)).parquet(str(directory))


def ipc_frame(spark: Any, path: Path, per_trigger: int, partitions: int, ddl: str | None = None) -> Any:
    return (
        spark.readStream.format("benchipc")
        .option("path", str(path))
        .option("pertrigger", str(per_trigger))
        .option("partitions", str(partitions))
        .option("ddl", ddl or SCHEMA_DDL)
        .load()
    )


# -- inputs for the comparisons: the source's own records, pulled once ---------------------
def pull_all(namesrv: str, topic: str, group: str) -> tuple[list[pa.RecordBatch], dict[str, float]]:
    """Every record of ``topic`` as source RecordBatches, timing pull and conversion apart."""
    view = view_for(namesrv, group)
    queues = view.queues([topic])
    high = view.max_offsets(queues)
    bodies: list[tuple[str, bytes]] = []
    started = time.perf_counter()
    for queue in queues:
        bodies += [(queue.broker_name, b) for b in view.read_range(queue, 0, high[queue], 4096)]
    pull_s = time.perf_counter() - started
    started = time.process_time()
    batches = [sm_arrow.records_to_arrow(body, broker) for broker, body in bodies]
    arrow_s = time.process_time() - started
    return batches, {
        "pull_s": pull_s,
        "arrow_cpu_s": arrow_s,
        "pulls": len(bodies),
        "rows": sum(b.num_rows for b in batches),
    }


def arrow_parts(body: bytes, broker: str, repeat: int = 20) -> dict[str, float]:
    """CPU milliseconds per call of records_to_arrow and its main parts, on one pulled body."""
    columns = decode_columns(body)
    raw = np.frombuffer(columns.buffer, dtype=np.uint8)
    parts = {
        "records_to_arrow (lean, C: the source's path)": lambda: sm_arrow.records_to_arrow(
            body, broker, columns=sm_arrow.LEAN_COLUMNS, topic="SparkBench"
        ),
        "records_to_arrow (lean, numpy reference)": lambda: sm_arrow.records_to_arrow(
            body, broker, columns=sm_arrow.LEAN_COLUMNS, topic="SparkBench", native=False
        ),
        "records_to_arrow (lean + properties, C: includeProperties=true)": lambda: sm_arrow.records_to_arrow(
            body, broker, columns=source_columns(include_properties=True), topic="SparkBench"
        ),
        "records_to_arrow (lean + properties, numpy reference)": lambda: sm_arrow.records_to_arrow(
            body, broker, columns=source_columns(include_properties=True), topic="SparkBench", native=False
        ),
        "records_to_arrow (wide)": lambda: sm_arrow.records_to_arrow(body, broker),
        "_property_values (TAGS, KEYS, UNIQ_KEY)": lambda: sm_arrow._property_values(
            raw, columns, ("TAGS", "KEYS", "UNIQ_KEY")
        ),
        "decode_columns": lambda: decode_columns(body),
        "_properties (map, TAGS, KEYS, UNIQ_KEY)": lambda: sm_arrow._properties(raw, columns),
        "_bodies": lambda: sm_arrow._bodies(raw, columns),
        "topic _slices": lambda: sm_arrow._slices(raw, columns.topic_starts, columns.topic_lengths, pa.string()),
        "_offset_msg_ids": lambda: sm_arrow._offset_msg_ids(columns),
        "_hosts x2": lambda: (
            sm_arrow._hosts(columns.heads["store_ip"], columns.heads["store_port"].astype(np.int32)),
            sm_arrow._hosts(columns.heads["born_ip"], columns.heads["born_port"].astype(np.int32)),
        ),
    }
    out = {}
    for name, call in parts.items():
        call()
        started = time.process_time()
        for _ in range(repeat):
            call()
        out[name] = (time.process_time() - started) / repeat * 1000
    return out


def write_parquet(table: pa.Table, directory: Path) -> None:
    directory.mkdir(parents=True)
    edges = np.linspace(0, table.num_rows, PARQUET_FILES + 1).astype(int)
    for i, (a, b) in enumerate(pairwise(edges)):
        pq.write_table(table.slice(a, b - a), directory / f"part-{i:03d}.parquet")


def write_ipc(table: pa.Table, path: Path) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=4096)


SOURCE, SOURCE_NET, P4, PLEAN, IPC, IPC4 = (
    "source: sparkmq (lean default schema) → noop",
    "source-net: sparkmq, pulled over sockets (localReads=false) → noop",
    "parquet-4col → noop",
    "parquet-lean (same 10 columns) → noop",
    "arrow-source-lean (Python, same 10 columns, no broker) → noop",
    "arrow-source-4col (Python, no broker) → noop",
)
CASES = {
    "source": SOURCE,
    "sourcenet": SOURCE_NET,
    "parquet4": P4,
    "parquetlean": PLEAN,
    "arrowlean": IPC,
    "arrow4": IPC4,
}
PYTHON_CASES = (SOURCE, SOURCE_NET, IPC, IPC4)
SOURCES = (SOURCE, SOURCE_NET)


def chosen_cases(spec: str, partitions: int) -> list[tuple[str, int]]:
    """``source,arrowlean:4`` → (label, partitions per micro-batch) pairs; a Python case's label names its
    partition count when it differs from the run's default (``partitions``); Parquet plans its own."""
    out = []
    for item in filter(None, (c.strip() for c in spec.split(","))):
        name, _, count = item.partition(":")
        label, parts = CASES[name], int(count) if count else partitions
        if label in PYTHON_CASES and parts != partitions:
            label += f" [{parts} partitions]"
        out.append((label, parts))
    return out


NARROW = ["topic", "queueId", "queueOffset", "body"]


def write_inputs(batches: list[pa.RecordBatch], directory: Path) -> None:
    """The source's records as Parquet and Arrow files: the source's default (lean) columns, and 4 columns."""
    lean = pa.Table.from_batches(batches).combine_chunks().select(list(sm_arrow.LEAN_COLUMNS))
    narrow = lean.select(NARROW)
    write_parquet(narrow, directory / "parquet4")
    write_parquet(lean, directory / "parquetlean")
    write_ipc(lean, directory / "ipclean.arrow")
    write_ipc(narrow, directory / "ipc4.arrow")


@dataclass
class SourceCases:
    """Runs each case against one input set (a topic plus its files)."""

    spark: Any
    namesrv: str
    broker_pid: int
    topic: str
    directory: Path
    rows: int
    per_trigger: int
    runs: int = 0

    def run(self, label: str, partitions: int) -> Run:
        self.runs += 1
        case = label.split(" [")[0]
        d, files_per_trigger = self.directory, max(1, round(PARQUET_FILES * self.per_trigger / self.rows))
        if case in SOURCES:
            group = f"{self.topic}-source-{self.runs}"
            frame = source_frame(
                self.spark, self.namesrv, self.topic, group, self.per_trigger, partitions, local=case == SOURCE
            )
        elif case in (P4, PLEAN):
            frame = parquet_frame(self.spark, d / ("parquet4" if case == P4 else "parquetlean"), files_per_trigger)
        else:
            frame = ipc_frame(
                self.spark,
                d / ("ipclean.arrow" if case == IPC else "ipc4.arrow"),
                self.per_trigger,
                partitions,
                "topic string, queueId int, queueOffset long, body binary" if case == IPC4 else None,
            )
        run = run_stream(
            label, frame, d / "checkpoints" / f"{case.split(':')[0]}-{self.runs}", self.rows, self.broker_pid
        )
        if case in (P4, PLEAN):
            run.note = f"maxFilesPerTrigger {files_per_trigger} of {PARQUET_FILES} files"
        return run


def trigger_rate(runs: list[Run], case: str) -> float:
    """Median over a case's runs of rows / the sum of its triggers' triggerExecution (the steady state:
    what is left of the wall once the per-query start, before the first trigger, is taken out)."""
    return float(np.median([r.rows / sum(b[1] for b in r.batches) for r in runs if r.case == case and r.batches]))


def ratios(runs: list[Run], chosen: list[str]) -> list[str]:
    """Each source case against each baseline, by wall-clock rows/s, by CPU (the load-independent one)
    and, labelled apart, by the triggers alone."""
    lines = []
    for source in [c for c in chosen if c.startswith(SOURCES)]:
        others = [c for c in chosen if not c.startswith(SOURCES)]
        if not others:
            continue
        rate, cpu, steady = median_rate(runs, source), median_cpu(runs, source), trigger_rate(runs, source)
        name = source.split(" → ")[0] + (" [" + source.split(" [")[1] if " [" in source else "")
        lines += [
            f"{name} rows/s relative to (medians of whole-query wall-clock rows/s, the headline): "
            + "; ".join(f"{c.split(' ')[0]}{_parts(c)} {rate / median_rate(runs, c):.0%}" for c in others)
            + " (targets: ≥ 90 % of arrow-source-lean, ≥ 50 % of parquet-lean)",
            f"{name}: CPU of the other case / CPU of the source (whole queries, load-independent): "
            + "; ".join(f"{c.split(' ')[0]}{_parts(c)} {median_cpu(runs, c) / cpu:.0%}" for c in others),
            f"{name}, per trigger only (steady state: rows / sum of triggerExecution, medians; leaves out "
            "the per-query start, NOT the headline): "
            + "; ".join(f"{c.split(' ')[0]}{_parts(c)} {steady / trigger_rate(runs, c):.0%}" for c in others),
            f"{name} rows/s relative to the other case's run of the same repeat (interleaved pairs: a load change "
            "between repeats cancels), median [min–max]: "
            + "; ".join(f"{c.split(' ')[0]}{_parts(c)} {_pairs(runs, source, c)}" for c in others),
        ]
    return lines


def _pairs(runs: list[Run], case: str, other: str) -> str:
    """The median and range of ``case``'s rows/s over ``other``'s, repeat by repeat."""
    mine, theirs = ([r.rate for r in runs if r.case == c] for c in (case, other))
    ratios = sorted(a / b for a, b in zip(mine, theirs, strict=False))
    if not ratios:
        return "–"
    return f"{ratios[(len(ratios) - 1) // 2]:.0%} [{ratios[0]:.0%}–{ratios[-1]:.0%}]"


def _parts(label: str) -> str:
    return " [" + label.split(" [")[1] if " [" in label else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="100,000 messages, one repeat")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each case, interleaved (default 3)")
    parser.add_argument("--per-trigger", type=int, default=250_000, help="maxOffsetsPerTrigger (default 250,000)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated subset of {','.join(CASES)}; a Python case may add :N partitions (source:4)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        help="partitions per micro-batch of the Python cases: the source's maxPartitions, the trivial source's "
        "plan (default: Spark's defaultParallelism; 4 = one per queue, the source's default)",
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy the Python workers during one more source run"
    )
    args = parser.parse_args(argv)
    n, repeat = (100_000, 1) if args.quick else (args.messages, args.repeat)
    per_trigger = min(args.per_trigger, n)

    def log(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    with spark_bench("source") as bench:
        root, namesrv, broker, runs = bench.root, bench.namesrv, bench.broker, bench.runs
        warm_n = max(n // 5, 8_000)
        asyncio.run(produce(namesrv.address, "SparkBenchWarm", warm_n))
        log(f"produced {n:,} in {asyncio.run(produce(namesrv.address, 'SparkBench', n)):.2f} s")
        warm_batches, _ = pull_all(namesrv.address, "SparkBenchWarm", "bench-pieces-warm")
        batches, pieces = pull_all(namesrv.address, "SparkBench", "bench-pieces")
        write_inputs(warm_batches, root / "warm")
        write_inputs(batches, root / "main")
        spark = bench.spark = spark_session(args.master, IpcDataSource)
        partitions = args.partitions or spark.sparkContext.defaultParallelism
        plan = chosen_cases(args.cases, partitions)
        chosen = [label for label, _ in plan]
        log(f"spark up, defaultParallelism {spark.sparkContext.defaultParallelism}; warming up on {warm_n:,} rows")
        bench.notes.append(
            f"partitions per micro-batch of the Python cases: {partitions} unless the case names its own "
            f"(the source: maxPartitions={partitions}, {QUEUES} queues' ranges packed; the trivial source: "
            f"{partitions} row ranges); Parquet packs its files itself (Spark's maxPartitionBytes / defaultParallelism)"
        )
        warm = SourceCases(
            spark, namesrv.address, broker.pid, "SparkBenchWarm", root / "warm", warm_n, max(per_trigger // 5, 1)
        )
        cases = SourceCases(spark, namesrv.address, broker.pid, "SparkBench", root / "main", n, per_trigger)
        for _ in range(2):  # the JIT keeps improving over the first runs of each plan
            for label, parts in plan:
                warm.run(label, parts)
        for rep in range(repeat):
            for label, parts in plan:
                runs.append(cases.run(label, parts))
            log(
                f"repeat {rep}: "
                + ", ".join(f"{r.case.split(' ')[0]}{_parts(r.case)} {r.rate:,.0f}" for r in runs[-len(chosen) :])
                + f" rows/s; load average {loadavg()}"
            )
        bench.load_end = loadavg()
        if args.profile and SOURCE in chosen:
            args.profile.mkdir(parents=True, exist_ok=True)
            spy = WorkerProfiler(args.profile / "source", jvm_pid(spark), broker.pid)
            cases.run(SOURCE, partitions)
            bench.profile = "## Python workers and the broker during one more source run (not timed)\n" + spy.stop()
        bench.notes += ratios(runs, chosen)
        bench.notes.append(
            "per-query fixed cost (wall minus the sum of triggerExecution: the query's start, Spark's fresh "
            "Python runner for a Python source, and its end; median over runs [min–max]): "
            + "; ".join(
                f"{c.split(' ')[0]}{_parts(c)} {np.median(f):.2f} s [{min(f):.2f}–{max(f):.2f}]"
                for c in chosen
                if (f := [r.seconds - sum(b[1] for b in r.batches) for r in runs if r.case == c])
            )
        )
        bench.notes.append(
            f"pieces outside Spark (this process, one thread): pulled {pieces['rows']:,} records in "
            f"{pieces['pulls']} pulls of ≤4096, {pieces['pull_s']:.2f} s wall; records_to_arrow "
            f"{pieces['arrow_cpu_s']:.2f} CPU-s ({pieces['rows'] / pieces['arrow_cpu_s']:,.0f} records per CPU-s)"
        )
        view = view_for(namesrv.address, "bench-pieces")
        body = next(view.read_range(view.queues(["SparkBench"])[0], 0, 4096, 4096))
        bench.notes.append(
            "records_to_arrow parts on one 4096-record pull (CPU ms per call): "
            + ", ".join(f"{k} {v:.2f}" for k, v in arrow_parts(body, "broker-a").items())
        )
        whole = pa.Table.from_batches(batches)
        bench.notes.append(
            f"Arrow bytes per row: wide 15 columns {whole.nbytes / n:.0f}, lean "
            f"{whole.select(list(sm_arrow.LEAN_COLUMNS)).nbytes / n:.0f}, 4 columns "
            f"{whole.select(NARROW).nbytes / n:.0f}"
        )
        bench.notes.append(
            "every timed run, in order [wall s, Σ triggerExecution s, the first trigger's s, CPU s of JVM / "
            "Spark's Python (of it, the daemon's workers'; the rest is the per-query runner's and planners') / "
            "broker]: "
            + "; ".join(
                f"{r.case.split(' ')[0]}{_parts(r.case)} {r.seconds:.2f} {sum(b[1] for b in r.batches):.2f} "
                f"{r.batches[0][1] if r.batches else 0:.2f} {r.jvm_cpu:.2f}/{r.python_cpu:.2f} "
                f"({r.worker_python_cpu:.2f})/{r.broker_cpu:.2f}"
                for r in runs
            )
        )
        for case in chosen:
            same = sorted((x for x in runs if x.case == case), key=lambda x: x.seconds)
            if same and same[0].batches:
                r = same[(len(same) - 1) // 2]
                bench.notes.append(
                    f"{case} (median run) batches [rows, triggerExecution s, processedRowsPerSecond, "
                    "latestOffset s, queryPlanning s]: "
                    + "; ".join(f"{b[0]:,} {b[1]:.2f} {b[2]:,.0f} {b[3]:.3f} {b[4]:.3f}" for b in r.batches)
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
