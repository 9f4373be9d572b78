"""Spark benchmark: the ``sparkmq`` source and sink against Parquet, one local Spark session.

Run from the repo root::

    .venv/bin/python bench/spark_bench.py                  # 1,000,000 messages, 3 repeats (~10 min on 2 vCPUs)
    .venv/bin/python bench/spark_bench.py --quick          # 100,000 messages, 1 repeat (smoke run, ~1.5 min)
    .venv/bin/python bench/spark_bench.py --cases source,parquet4 --repeat 5
    .venv/bin/python bench/spark_bench.py --profile bench-profiles   # + py-spy of the Python workers

What it does (results in docs/benchmarks.md):

1. Starts ``sparkmq namesrv`` and ``sparkmq broker --flush async`` (production segment sizes)
   as subprocesses in a temporary directory, and produces N messages of 100 random bytes
   (``KEYS`` and ``TAGS`` set, as a Java producer would) into a topic of 4 queues with
   ``AsyncProducer.send_batch`` (256 per batch, 16 batches in flight).
2. Pulls them back once, outside Spark (``BrokerView.read_range`` + ``records_to_arrow``),
   timing the two apart, and writes the source's default (lean, 10-column) RecordBatches (and
   their ``topic, queueId, queueOffset, body`` columns) as Parquet (16 files) and Arrow files.
3. Warms up: every case runs twice on N/5 rows of its own, so neither the JVM start, the
   JIT nor the first fork of Python workers lands in a timed run.
4. Timed cases, interleaved, ``--repeat`` times each (the table shows the median run):

   * **source**: ``readStream.format("sparkmq")`` (earliest, ``maxOffsetsPerTrigger``
     250,000, a fresh consumer group) → ``writeStream.format("noop")``, ``Trigger.AvailableNow``;
   * **parquet4** / **parquetlean**: ``readStream.format("parquet")`` of the 4- / 10-column files,
     ``maxFilesPerTrigger`` sized to 250,000-row batches → noop, AvailableNow;
   * **arrowlean** / **arrow4**: a trivial Python streaming data source (defined here) yielding
     slices of the Arrow file (4 partitions per batch, 4096-row RecordBatches, like the real
     source): Spark's own cost of a Python Arrow source with that schema, no broker, no
     decoding. arrowlean is the ceiling for any Python source with ``sparkmq``'s default schema;
   * **sink**: a cached DataFrame of N rows (``body`` binary, ``topic``) written with
     ``df.write.format("sparkmq").mode("append")``; the broker's max offsets must sum to N.

   rows/s is N over the wall time from ``start()`` to the end of ``awaitTermination()`` (or of
   ``save()``). Per-batch ``triggerExecution`` and ``processedRowsPerSecond`` come from
   ``recentProgress``. CPU seconds are read from /proc for the JVM, for every Python process
   under it (daemon, workers, planner and streaming-source runners) and for the broker.
5. Pieces: ``records_to_arrow`` and its parts on one 4096-record pull; the sink's
   bulk encoding (``encode_rows``); the sink's rows/s over the produce baseline's, same run.

``--profile DIR`` then runs py-spy (``--subprocesses --nonblocking``) on the PySpark daemon
during one more (untimed) source run and sink write, and prints the workers' top functions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench_common import REPO, loadavg  # noqa: E402 - bench/ is sys.path[0]

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))
os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers use this venv
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import contextlib

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: E402
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow  # noqa: E402

import sparkmq  # noqa: E402
from sparkmq.connector import arrow as sm_arrow  # noqa: E402
from sparkmq.connector.broker_view import view_for  # noqa: E402
from sparkmq.message.bulk import decode_columns  # noqa: E402
from tests.support.processes import BrokerProcess, NamesrvProcess  # noqa: E402

QUEUES = 4
BODY_BYTES = 100
SEND_BATCH = 256
SEND_IN_FLIGHT = 16
PARQUET_FILES = 16
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system seconds of one process (all its threads)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def descendants(root: int) -> set[int]:
    """Every live process under ``root`` (not ``root`` itself)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                parents[int(entry)] = int(_stat(entry)[1])
    tree: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
        tree |= frontier
    return tree


def spark_cpu(jvm: int) -> tuple[float, float]:
    """(JVM, Python) CPU seconds so far: the JVM's threads; every descendant process (the
    PySpark daemon, its workers, planner and streaming-source workers) plus those already reaped."""
    python = 0.0
    for pid in descendants(jvm):
        try:
            fields = _stat(pid)
        except OSError:
            continue
        python += sum(int(x) for x in fields[11:15]) / CLOCK_TICKS
    root = _stat(jvm)
    return (int(root[11]) + int(root[12])) / CLOCK_TICKS, python + (int(root[13]) + int(root[14])) / CLOCK_TICKS


# -- producing -----------------------------------------------------------------------------
async def produce(namesrv: str, topic: str, count: int) -> float:
    """``count`` messages round-robin over the topic's 4 queues; returns seconds."""
    pool = [os.urandom(BODY_BYTES) for _ in range(1024)]
    messages = [sparkmq.Message(topic, pool[i % 1024], tags="TagA", keys=f"order-{i}") for i in range(count)]
    async with sparkmq.AsyncProducer("PID_SPARK_BENCH", namesrv) as producer:
        queues = (await producer.instance.publish_route(topic, "TBW102", QUEUES)).publish_queues()
        assert len(queues) == QUEUES, queues
        chunks = iter(range(0, count, SEND_BATCH))
        started = time.perf_counter()

        async def worker() -> None:
            for first in chunks:
                batch = messages[first : first + SEND_BATCH]
                await producer.send_batch(batch, queue=queues[(first // SEND_BATCH) % QUEUES])

        await asyncio.gather(*(worker() for _ in range(SEND_IN_FLIGHT)))
        return time.perf_counter() - started


# -- a trivial Python Arrow source (the ceiling for any Python source of this schema) ------
@dataclass(frozen=True)
class RowRange(InputPartition):  # type: ignore[misc]
    start: int
    end: int


class IpcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, path: str, per_trigger: int) -> None:
        import pyarrow as pa

        self.path, self.per_trigger = path, per_trigger
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
        edges = np.linspace(start["row"], end["row"], QUEUES + 1).astype(int).tolist()
        return [RowRange(a, b) for a, b in pairwise(edges) if b > a]

    def read(self, partition: RowRange) -> Any:
        import pyarrow as pa

        with pa.memory_map(self.path) as source:
            table = pa.ipc.open_file(source).read_all().slice(partition.start, partition.end - partition.start)
            yield from table.to_batches(max_chunksize=4096)

    def commit(self, end: dict[str, int]) -> None:
        pass


class IpcDataSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "benchipc"

    def schema(self) -> str:
        return self.options["ddl"]

    def streamReader(self, schema: Any) -> IpcStreamReader:
        return IpcStreamReader(self.options["path"], int(self.options["pertrigger"]))


# -- Spark ---------------------------------------------------------------------------------
@dataclass
class Run:
    """One timed query."""

    case: str
    rows: int
    seconds: float
    batches: list[tuple[int, float, float]] = field(default_factory=list)  # rows, triggerExecution s, rows/s
    broker_cpu: float = 0.0
    note: str = ""
    jvm_cpu: float = 0.0
    python_cpu: float = 0.0

    @property
    def cpu(self) -> float:
        return self.broker_cpu + self.jvm_cpu + self.python_cpu

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def spark_session(master: str) -> Any:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("sparkmq-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.memory", "4g").config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(IpcDataSource)
    sparkmq.register(spark)
    return spark


def jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._gateway.proc.pid)


class Meter:
    """Wall time plus the CPU of the broker, the JVM and Spark's Python processes over a block."""

    def __init__(self, spark: Any, broker_pid: int) -> None:
        self.jvm, self.broker = jvm_pid(spark), broker_pid

    def __enter__(self) -> Meter:
        self.cpu = (cpu_seconds(self.broker), *spark_cpu(self.jvm))
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started
        now = (cpu_seconds(self.broker), *spark_cpu(self.jvm))
        self.broker_cpu, self.jvm_cpu, self.python_cpu = (b - a for a, b in zip(self.cpu, now, strict=True))

    def fill(self, run: Run) -> Run:
        run.seconds, run.broker_cpu, run.jvm_cpu, run.python_cpu = self.seconds, self.broker_cpu, self.jvm_cpu, self.python_cpu
        return run


def run_stream(case: str, frame: Any, checkpoint: Path, rows: int, broker_pid: int) -> Run:
    """``frame`` → noop with Trigger.AvailableNow; wall time start → termination."""
    with Meter(frame.sparkSession, broker_pid) as meter:
        query = frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{case}: {query.exception()}")
    batches = [(p["numInputRows"], p["durationMs"].get("triggerExecution", 0) / 1000, p["processedRowsPerSecond"])
               for p in query.recentProgress if p["numInputRows"]]
    got = sum(b[0] for b in batches)
    if got != rows:
        raise RuntimeError(f"{case}: read {got} rows, expected {rows}")
    return meter.fill(Run(case, rows, 0.0, batches))


def source_frame(spark: Any, namesrv: str, topic: str, group: str, per_trigger: int) -> Any:
    return (spark.readStream.format("sparkmq").option("namesrvAddr", namesrv).option("topic", topic)
            .option("consumerGroup", group).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(per_trigger)).load())


def parquet_frame(spark: Any, directory: Path, files_per_trigger: int) -> Any:
    schema = spark.read.parquet(str(directory)).schema
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", str(files_per_trigger)).parquet(str(directory))


def ipc_frame(spark: Any, path: Path, per_trigger: int, ddl: str | None = None) -> Any:
    return (spark.readStream.format("benchipc").option("path", str(path)).option("pertrigger", str(per_trigger))
            .option("ddl", ddl or sm_arrow.SCHEMA_DDL).load())


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
    started = time.perf_counter()
    batches = [sm_arrow.records_to_arrow(body, broker) for broker, body in bodies]
    arrow_s = time.perf_counter() - started
    return batches, {"pull_s": pull_s, "arrow_s": arrow_s, "pulls": len(bodies), "rows": sum(b.num_rows for b in batches)}


def arrow_parts(body: bytes, broker: str, repeat: int = 20) -> dict[str, float]:
    """Milliseconds per call of records_to_arrow and its main parts, on one pulled body."""
    columns = decode_columns(body)
    raw = np.frombuffer(columns.buffer, dtype=np.uint8)
    parts = {
        "records_to_arrow (lean, the default)": lambda: sm_arrow.records_to_arrow(body, broker, columns=sm_arrow.LEAN_COLUMNS),
        "records_to_arrow (wide)": lambda: sm_arrow.records_to_arrow(body, broker),
        "_property_values (TAGS, KEYS, UNIQ_KEY)": lambda: sm_arrow._property_values(raw, columns, ("TAGS", "KEYS", "UNIQ_KEY")),
        "decode_columns": lambda: decode_columns(body),
        "_properties (map, TAGS, KEYS, UNIQ_KEY)": lambda: sm_arrow._properties(raw, columns),
        "_bodies": lambda: sm_arrow._bodies(raw, columns),
        "topic _slices": lambda: sm_arrow._slices(raw, columns.topic_starts, columns.topic_lengths, pa.string()),
        "_offset_msg_ids": lambda: sm_arrow._offset_msg_ids(columns),
        "_hosts x2": lambda: (sm_arrow._hosts(columns.heads["store_ip"], columns.heads["store_port"].astype(np.int32)),
                              sm_arrow._hosts(columns.heads["born_ip"], columns.heads["born_port"].astype(np.int32))),
    }
    out = {}
    for name, call in parts.items():
        call()
        started = time.perf_counter()
        for _ in range(repeat):
            call()
        out[name] = (time.perf_counter() - started) / repeat * 1000
    return out


def write_parquet(table: pa.Table, directory: Path) -> None:
    directory.mkdir(parents=True)
    edges = np.linspace(0, table.num_rows, PARQUET_FILES + 1).astype(int)
    for i, (a, b) in enumerate(pairwise(edges)):
        pq.write_table(table.slice(a, b - a), directory / f"part-{i:03d}.parquet")


def write_ipc(table: pa.Table, path: Path) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=4096)


# -- the sink ------------------------------------------------------------------------------
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
    started = time.perf_counter()
    encode_rows(table, BulkIds())
    return (time.perf_counter() - started) / batch.num_rows * 1e6


# -- profiling the Python workers ----------------------------------------------------------
class WorkerProfiler:
    """py-spy ``--subprocesses`` on the PySpark daemon(s) of this JVM (not other Sparks'), for one query."""

    def __init__(self, out: Path, jvm: int) -> None:
        self.out = out
        daemons = [str(pid) for pid in descendants(jvm) if _is_daemon(str(pid))]
        spy = Path(sys.executable).with_name("py-spy")
        self.processes = [subprocess.Popen([str(spy), "record", "--pid", pid, "--subprocesses", "--rate", "200", "--nonblocking",
                                            "--format", "raw", "--output", f"{out}.{pid}"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in daemons]
        time.sleep(1.0)

    def stop(self, top: int = 25) -> str:
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        total = 0
        for process in self.processes:
            process.send_signal(2)
            process.wait(60)
        for path in self.out.parent.glob(self.out.name + ".*"):
            for line in path.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
                if not frames or frames[-1].split(" (")[0].rsplit(".", 1)[-1] in IDLE_FUNCTIONS:
                    continue  # waiting: for a task, a socket or a lock
                total += int(count)
                own[_short(frames[-1])] += int(count)
                for name in {_short(f) for f in frames}:
                    inclusive[name] += int(count)
        lines = [f"{total} busy samples in the Python workers; self:"]
        lines += [f"  {100 * n / max(total, 1):5.1f}%  {f}" for f, n in own.most_common(top)]
        lines += ["inclusive:"] + [f"  {100 * n / max(total, 1):5.1f}%  {f}" for f, n in inclusive.most_common(top)]
        return "\n".join(lines)


IDLE_FUNCTIONS = frozenset({"read_int", "manager", "wait", "select", "_worker_loop", "read", "readinto", "poll"})


def _is_daemon(pid: str) -> bool:
    try:
        return b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _short(frame: str) -> str:
    function, _, location = frame.rpartition(" (")
    path, _, number = location.rstrip(")").rpartition(":")
    return f"{function} ({'/'.join(path.split('/')[-2:])})"


def close_views() -> None:
    """Close this process's cached BrokerViews (no heartbeats to a broker that is stopping)."""
    from sparkmq.client import loop_thread
    from sparkmq.connector import broker_view

    for view in list(broker_view._views.values()):
        loop_thread.run(view._reader.close())
    broker_view._views.clear()


# -- driver --------------------------------------------------------------------------------
def machine() -> str:
    import pyspark

    git = ["git", "-C", str(REPO)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}"
            f"{' + uncommitted changes' if dirty.strip() else ''}, {cpu}, nproc {os.cpu_count()}, Python "
            f"{sys.version.split()[0]}, PySpark {pyspark.__version__}, pyarrow {pa.__version__}, Java "
            f"{subprocess.run(['java', '-version'], capture_output=True, text=True).stderr.split(chr(34))[1]}")




def table(runs: list[Run]) -> str:
    """One row per case: the median run by wall time, the others' rows/s in the note."""
    lines = ["| case | rows | seconds | rows/s | batches | median trigger s | CPU s: JVM | Python | broker | "
             "rows per CPU-s | note |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    cases: dict[str, list[Run]] = {}
    for r in runs:
        cases.setdefault(r.case, []).append(r)
    for case, same in cases.items():
        ordered = sorted(same, key=lambda r: r.seconds)
        r = ordered[(len(ordered) - 1) // 2]
        trig = f"{float(np.median([b[1] for b in r.batches])):.2f}" if r.batches else ""
        note = r.note + (f"; median of {len(same)}: " + ", ".join(f"{x.rate:,.0f}" for x in ordered) if len(same) > 1 else "")
        per_cpu = f"{r.rows / r.cpu:,.0f}" if r.cpu else ""
        lines.append(f"| {case} | {r.rows:,} | {r.seconds:.2f} | {r.rate:,.0f} | {len(r.batches) or ''} | {trig} | "
                     f"{r.jvm_cpu:.2f} | {r.python_cpu:.2f} | {r.broker_cpu:.2f} | {per_cpu} | {note.strip('; ')} |")
    return "\n".join(lines)


def median_rate(runs: list[Run], case: str) -> float:
    return float(np.median([r.rate for r in runs if r.case == case]))


def median_cpu(runs: list[Run], case: str) -> float:
    """Median CPU seconds (JVM + Spark's Python + broker) of a case."""
    return float(np.median([r.cpu for r in runs if r.case == case]))


SOURCE, P4, P15, IPC, IPC4, SINK = (
    "source: sparkmq (lean default schema) → noop", "parquet-4col → noop", "parquet-lean (same 10 columns) → noop",
    "arrow-source-lean (Python, same 10 columns, no broker) → noop", "arrow-source-4col (Python, no broker) → noop",
    "sink: df.write sparkmq")
PRODUCE = "produce: AsyncProducer.send_batch 256, 16 in flight"
CASES = {"source": SOURCE, "parquet4": P4, "parquetlean": P15, "arrowlean": IPC, "arrow4": IPC4, "sink": SINK,
         "produce": PRODUCE}


def write_inputs(batches: list[pa.RecordBatch], directory: Path) -> None:
    """The source's records as Parquet and Arrow files: the source's default (lean) columns, and 4 columns."""
    table = pa.Table.from_batches(batches).combine_chunks().select(list(sm_arrow.LEAN_COLUMNS))
    narrow = table.select(["topic", "queueId", "queueOffset", "body"])
    write_parquet(narrow, directory / "parquet4")
    write_parquet(table, directory / "parquetlean")
    write_ipc(table, directory / "ipclean.arrow")
    write_ipc(narrow, directory / "ipc4.arrow")


class Cases:
    """Runs each case against one input set (a topic plus its files)."""

    def __init__(self, spark: Any, namesrv: str, broker_pid: int, topic: str, directory: Path, rows: int,
                 per_trigger: int) -> None:
        self.spark, self.namesrv, self.broker_pid = spark, namesrv, broker_pid
        self.topic, self.directory, self.rows, self.per_trigger = topic, directory, rows, per_trigger
        self.files_per_trigger = max(1, round(PARQUET_FILES * per_trigger / rows))
        self.runs = 0

    def run(self, case: str) -> Run:
        self.runs += 1
        where = self.directory / "checkpoints" / f"{case}-{self.runs}"
        d = self.directory
        if case == PRODUCE:  # the sink's baseline, interleaved with it: same broker, same load
            with Meter(self.spark, self.broker_pid) as meter:
                asyncio.run(produce(self.namesrv, f"{self.topic}Produce{self.runs}", self.rows))
            return meter.fill(Run(PRODUCE, self.rows, 0.0, note="Python CPU: Spark's only (the producer is this process)"))
        if case == SINK:
            return run_sink(self.spark, self.namesrv, d / "parquet4", f"{self.topic}Sink{self.runs}", self.rows,
                            self.broker_pid)
        if case == SOURCE:
            frame = source_frame(self.spark, self.namesrv, self.topic, f"{self.topic}-source-{self.runs}", self.per_trigger)
        elif case in (P4, P15):
            frame = parquet_frame(self.spark, d / ("parquet4" if case == P4 else "parquetlean"), self.files_per_trigger)
        else:
            frame = ipc_frame(self.spark, d / ("ipclean.arrow" if case == IPC else "ipc4.arrow"), self.per_trigger,
                              "topic string, queueId int, queueOffset long, body binary" if case == IPC4 else None)
        run = run_stream(case, frame, where, self.rows, self.broker_pid)
        if case in (P4, P15):
            run.note = f"maxFilesPerTrigger {self.files_per_trigger} of {PARQUET_FILES} files"
        return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="100,000 messages, one repeat")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each case, interleaved (default 3)")
    parser.add_argument("--per-trigger", type=int, default=250_000, help="maxOffsetsPerTrigger (default 250,000)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="after the timed runs, py-spy the Python workers during one more source run and sink write")
    args = parser.parse_args(argv)
    n, repeat = (100_000, 1) if args.quick else (args.messages, args.repeat)
    per_trigger = min(args.per_trigger, n)
    chosen = [CASES[c.strip()] for c in args.cases.split(",") if c.strip()]
    facts = machine()
    print(f"sparkmq spark bench: {facts}, load average {loadavg()}", file=sys.stderr, flush=True)
    system_tmp = Path(tempfile.gettempdir())
    base = system_tmp if os.stat(system_tmp).st_dev == os.stat(REPO).st_dev else REPO / ".bench-tmp"
    base.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="sparkmq-spark-bench-", dir=base))
    load_start = loadavg()
    namesrv = NamesrvProcess.start()
    broker = BrokerProcess.start(root / "store", namesrv.address, "--flush", "async")
    spark = None
    runs: list[Run] = []
    notes: list[str] = []
    profiles: list[str] = []

    def log(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    try:
        warm_n = max(n // 5, 8_000)
        asyncio.run(produce(namesrv.address, "SparkBenchWarm", warm_n))
        seconds = asyncio.run(produce(namesrv.address, "SparkBench", n))
        runs.append(Run(f"{PRODUCE} (input, before Spark starts)", n, seconds))
        log(f"produced {n:,} in {seconds:.2f} s ({n / seconds:,.0f} msgs/s)")
        # the records as the source makes them, for the Parquet / Arrow comparisons and the pieces
        warm_batches, _ = pull_all(namesrv.address, "SparkBenchWarm", "bench-pieces-warm")
        batches, pieces = pull_all(namesrv.address, "SparkBench", "bench-pieces")
        write_inputs(warm_batches, root / "warm")
        write_inputs(batches, root / "main")

        spark = spark_session(args.master)
        log(f"spark up, defaultParallelism {spark.sparkContext.defaultParallelism}; warming up on {warm_n:,} rows")
        warm = Cases(spark, namesrv.address, broker.pid, "SparkBenchWarm", root / "warm", warm_n, max(per_trigger // 5, 1))
        main_cases = Cases(spark, namesrv.address, broker.pid, "SparkBench", root / "main", n, per_trigger)
        for _ in range(2):  # the JIT keeps improving over the first runs of each plan
            for case in chosen:
                warm.run(case)
        for rep in range(repeat):
            for case in chosen:
                runs.append(main_cases.run(case))
            log(f"repeat {rep}: " + ", ".join(f"{r.case.split(' ')[0]} {r.rate:,.0f}" for r in runs[-len(chosen):])
                + f" rows/s; load average {loadavg()}")
        load_end = loadavg()

        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for case, label in ((SOURCE, "source run"), (SINK, "sink write")):
                if case in chosen:
                    spy = WorkerProfiler(args.profile / case.split(":")[0], jvm_pid(spark))
                    main_cases.run(case)
                    profiles.append(f"## Python workers during one more {label} (not timed)\n" + spy.stop())

        if SOURCE in chosen and any(c in chosen for c in (P4, P15, IPC, IPC4)):
            source, source_cpu = median_rate(runs, SOURCE), median_cpu(runs, SOURCE)
            others = [c for c in (P4, P15, IPC, IPC4) if c in chosen]
            notes.append("source rows/s relative to (medians of wall-clock rows/s): "
                         + "; ".join(f"{c.split(' ')[0]} {source / median_rate(runs, c):.0%}" for c in others)
                         + " (targets: ≥ 90 % of arrow-source-lean, ≥ 50 % of parquet-lean)")
            notes.append("CPU of the other case / CPU of the source (load-independent): "
                         + "; ".join(f"{c.split(' ')[0]} {median_cpu(runs, c) / source_cpu:.0%}" for c in others))
        notes.append(f"pieces outside Spark (this process, one thread): pulled {pieces['rows']:,} records in "
                     f"{pieces['pulls']} pulls of ≤4096, {pieces['pull_s']:.2f} s ({pieces['rows'] / pieces['pull_s']:,.0f}/s); "
                     f"records_to_arrow {pieces['arrow_s']:.2f} s ({pieces['rows'] / pieces['arrow_s']:,.0f}/s)")
        view = view_for(namesrv.address, "bench-pieces")
        body = next(view.read_range(view.queues(["SparkBench"])[0], 0, 4096, 4096))
        parts = arrow_parts(body, "broker-a")
        notes.append("records_to_arrow parts on one 4096-record pull (ms per call): "
                     + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
        notes.append(f"sink encode_rows (bulk SEND_BATCH items): {sink_rows_cost(batches[0], 'SparkBenchSink'):.2f} µs/row")
        if SINK in chosen and PRODUCE in chosen:
            notes.append(f"sink rows/s relative to {PRODUCE} in this run: "
                         f"{median_rate(runs, SINK) / median_rate(runs, PRODUCE):.2f}x (target: ≥ 1.0x)")
        table = pa.Table.from_batches(batches)
        four = table.select(["topic", "queueId", "queueOffset", "body"])
        notes.append(f"Arrow bytes per row: wide 15 columns {table.nbytes / n:.0f}, "
                     f"lean {table.select(list(sm_arrow.LEAN_COLUMNS)).nbytes / n:.0f}, "
                     f"4 columns {four.nbytes / n:.0f}")
        for case in chosen:
            same = sorted((x for x in runs if x.case == case), key=lambda x: x.seconds)
            if same and same[0].batches:
                r = same[(len(same) - 1) // 2]
                notes.append(f"{case} (median run) batches [rows, triggerExecution s, processedRowsPerSecond]: "
                             + "; ".join(f"{b[0]:,} {b[1]:.2f} {b[2]:,.0f}" for b in r.batches))
    finally:
        if spark is not None:
            spark.stop()
        close_views()
        broker.stop()
        namesrv.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{facts}; load average {load_start} at the start, {load_end} after the timed runs")
    print(table(runs))
    print("\n".join(notes))
    if profiles:
        print("\n\n".join(profiles))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
