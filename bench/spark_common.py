"""What the Spark benchmarks share (bench/spark_source_bench.py, bench/spark_sink_bench.py).

A namesrv + broker pair and a producer for their input, one local SparkSession, a ``Meter`` of wall
time and process CPU (broker, JVM, Spark's Python processes, read from /proc), the results table,
and ``WorkerProfiler`` (py-spy on the PySpark daemon's workers during one query).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from bench_profile import short_frame

# bench/ is sys.path[0]
from bench_common import (
    CLOCK_TICKS,
    REPO,
    bench_root,
    commit,
    cpu_model,
    cpu_seconds,
    loadavg,
)

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))
os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers use this venv
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import numpy as np
import pyarrow as pa

import sparkmq

QUEUES = 4
BODY_BYTES = 100
SEND_BATCH = 256
SEND_IN_FLIGHT = 16


def _stat(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(root: int) -> set[int]:
    """Every live process under ``root`` (not ``root`` itself)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):  # a process that ended meanwhile
                parents[int(entry)] = int(_stat(entry)[1])
    tree: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
        tree |= frontier
    return tree


def spark_cpu(jvm: int) -> tuple[float, float, float]:
    """(JVM, Python, workers) CPU seconds so far: the JVM's threads; every descendant process (the
    PySpark daemon, its workers, planner and streaming-source workers) plus those already reaped; and
    of the Python, the PySpark daemon's and its workers' (forked from it, so named as it is; the
    daemon's reaped children included) alone."""
    python = workers = 0.0
    for pid in descendants(jvm):
        try:
            fields = _stat(pid)
        except OSError:
            continue
        cpu = sum(int(x) for x in fields[11:15]) / CLOCK_TICKS
        python += cpu
        if _is_daemon(str(pid)):
            workers += cpu
    root = _stat(jvm)
    return (
        (int(root[11]) + int(root[12])) / CLOCK_TICKS,
        python + (int(root[13]) + int(root[14])) / CLOCK_TICKS,
        workers,
    )


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


# -- Spark ---------------------------------------------------------------------------------
@dataclass
class Run:
    """One timed query."""

    case: str
    rows: int
    seconds: float
    # rows, triggerExecution s, rows/s, and of the trigger: latestOffset s, queryPlanning s (the driver's share)
    batches: list[tuple[int, float, float, float, float]] = field(default_factory=list)
    broker_cpu: float = 0.0
    note: str = ""
    jvm_cpu: float = 0.0
    python_cpu: float = 0.0
    # of python_cpu: the PySpark daemon's and its workers' (the rest: the per-query streaming-source
    # runner, planners)
    worker_python_cpu: float = 0.0

    @property
    def cpu(self) -> float:
        return self.broker_cpu + self.jvm_cpu + self.python_cpu

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def spark_session(master: str, *sources: Any) -> Any:
    """One local SparkSession with the sparkmq format and ``sources`` (Python data sources) registered."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("sparkmq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    for source in sources:
        spark.dataSource.register(source)
    sparkmq.register(spark)
    return spark


def jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._gateway.proc.pid)


class Meter:
    """Wall time plus the CPU of the broker, the JVM and Spark's Python processes over a block."""

    def __init__(self, spark: Any, broker_pid: int) -> None:
        self.jvm, self.broker = jvm_pid(spark), broker_pid

    def __enter__(self) -> Self:
        self.cpu = (cpu_seconds(self.broker), *spark_cpu(self.jvm))
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started
        now = (cpu_seconds(self.broker), *spark_cpu(self.jvm))
        self.broker_cpu, self.jvm_cpu, self.python_cpu, self.worker_python_cpu = (
            b - a for a, b in zip(self.cpu, now, strict=True)
        )

    def fill(self, run: Run) -> Run:
        run.seconds, run.broker_cpu, run.jvm_cpu, run.python_cpu, run.worker_python_cpu = (
            self.seconds,
            self.broker_cpu,
            self.jvm_cpu,
            self.python_cpu,
            self.worker_python_cpu,
        )
        return run


def run_stream(case: str, frame: Any, checkpoint: Path, rows: int, broker_pid: int) -> Run:
    """``frame`` → noop with Trigger.AvailableNow; wall time start → termination."""
    with Meter(frame.sparkSession, broker_pid) as meter:
        query = (
            frame.writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{case}: {query.exception()}")
    batches = [
        (
            p["numInputRows"],
            p["durationMs"].get("triggerExecution", 0) / 1000,
            p["processedRowsPerSecond"],
            p["durationMs"].get("latestOffset", 0) / 1000,
            p["durationMs"].get("queryPlanning", 0) / 1000,
        )
        for p in query.recentProgress
        if p["numInputRows"]
    ]
    got = sum(b[0] for b in batches)
    if got != rows:
        raise RuntimeError(f"{case}: read {got} rows, expected {rows}")
    return meter.fill(Run(case, rows, 0.0, batches))


# -- profiling the Python workers ----------------------------------------------------------
class WorkerProfiler:
    """py-spy ``--subprocesses`` on the PySpark daemon(s) of this JVM (not other Sparks'), and on the
    broker when its pid is given, for one query."""

    def __init__(self, out: Path, jvm: int, broker_pid: int | None = None) -> None:
        self.out = out
        daemons = [str(pid) for pid in descendants(jvm) if _is_daemon(str(pid))]
        targets = [(pid, f"{out}.{pid}", True) for pid in daemons]
        if broker_pid is not None:
            targets.append((str(broker_pid), f"{out}-broker.{broker_pid}", False))
        spy = Path(sys.executable).with_name("py-spy")
        self.processes = [
            subprocess.Popen(
                [str(spy), "record", "--pid", pid, *(["--subprocesses"] if children else [])]
                + ["--rate", "200", "--nonblocking", "--format", "raw", "--output", output],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for pid, output, children in targets
        ]
        time.sleep(1.0)

    def stop(self, top: int = 25) -> str:
        for process in self.processes:
            process.send_signal(2)
            process.wait(60)
        workers = _summary(self.out.parent.glob(self.out.name + ".*"), "the Python workers", top)
        broker = list(self.out.parent.glob(self.out.name + "-broker.*"))
        return workers + ("\n" + _summary(broker, "the broker", top) if broker else "")


def _summary(paths: Iterable[Path], title: str, top: int) -> str:
    """Busy samples of py-spy raw outputs: shares by own frame and inclusive."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
            if not frames or frames[-1].split(" (")[0].rsplit(".", 1)[-1] in IDLE_FUNCTIONS:
                continue  # waiting: for a task, a socket or a lock
            total += int(count)
            own[short_frame(frames[-1])] += int(count)
            for name in {short_frame(f) for f in frames}:
                inclusive[name] += int(count)
    lines = [f"{total} busy samples in {title}; self:"]
    lines += [f"  {100 * n / max(total, 1):5.1f}%  {f}" for f, n in own.most_common(top)]
    lines += ["inclusive:"] + [f"  {100 * n / max(total, 1):5.1f}%  {f}" for f, n in inclusive.most_common(top)]
    return "\n".join(lines)


IDLE_FUNCTIONS = frozenset({"read_int", "manager", "wait", "select", "_worker_loop", "read", "readinto", "poll"})


def _is_daemon(pid: str) -> bool:
    try:
        return b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def close_views() -> None:
    """Close this process's cached BrokerViews (no heartbeats to a broker that is stopping)."""
    from sparkmq.connector.broker_view import close_views as close_broker_views

    close_broker_views()


# -- driver --------------------------------------------------------------------------------
def machine() -> str:
    import pyspark

    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}, {cpu_model()}, "
        f"nproc {os.cpu_count()}, Python "
        f"{sys.version.split()[0]}, PySpark {pyspark.__version__}, pyarrow {pa.__version__}, Java "
        f"{subprocess.run(['java', '-version'], check=False, capture_output=True, text=True).stderr.split(chr(34))[1]}"
    )


def table(runs: list[Run]) -> str:
    """One row per case: the median run by wall time, the others' rows/s in the note."""
    lines = [
        (
            "| case | rows | seconds | rows/s | batches | median trigger s | CPU s: JVM | Python | broker | "
            "rows per CPU-s | note |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    cases: dict[str, list[Run]] = {}
    for r in runs:
        cases.setdefault(r.case, []).append(r)
    for case, same in cases.items():
        ordered = sorted(same, key=lambda r: r.seconds)
        r = ordered[(len(ordered) - 1) // 2]
        trig = f"{float(np.median([b[1] for b in r.batches])):.2f}" if r.batches else ""
        note = r.note + (
            f"; median of {len(same)}: " + ", ".join(f"{x.rate:,.0f}" for x in ordered) if len(same) > 1 else ""
        )
        per_cpu = f"{r.rows / r.cpu:,.0f}" if r.cpu else ""
        lines.append(
            f"| {case} | {r.rows:,} | {r.seconds:.2f} | {r.rate:,.0f} | {len(r.batches) or ''} | {trig} | "
            f"{r.jvm_cpu:.2f} | {r.python_cpu:.2f} | {r.broker_cpu:.2f} | {per_cpu} | {note.strip('; ')} |"
        )
    return "\n".join(lines)


def median_rate(runs: list[Run], case: str) -> float:
    return float(np.median([r.rate for r in runs if r.case == case]))


def median_cpu(runs: list[Run], case: str) -> float:
    """Median CPU seconds (JVM + Spark's Python + broker) of a case."""
    return float(np.median([r.cpu for r in runs if r.case == case]))


@dataclass
class SparkBench:
    """One Spark bench run: a temp ``root``, a NameServer and an async-flush broker, and what it prints at the end."""

    facts: str
    root: Path
    namesrv: Any
    broker: Any
    load_start: str
    load_end: str
    spark: Any = None
    runs: list[Run] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profile: str = ""

    def print(self) -> None:
        print(f"{self.facts}; load average {self.load_start} at the start, {self.load_end} after the timed runs")
        print(table(self.runs))
        print("\n".join(self.notes))
        if self.profile:
            print(self.profile)


def compile_package() -> None:
    """Write sparkmq's bytecode once, as installing the package would: Spark starts a fresh Python
    process per query (and per worker), and with PYTHONDONTWRITEBYTECODE set (this machine's
    checkouts set it) each one would otherwise compile every module it imports (~0.1 CPU-s a query;
    docs/design-notes.md, "Spark's per-query runner")."""
    import compileall

    compileall.compile_dir(str(REPO / "sparkmq"), quiet=1)


@contextlib.contextmanager
def spark_bench(name: str) -> Iterator[SparkBench]:
    """Start the services of the ``name`` bench; afterwards stop them (and Spark) and print its results."""
    from tests.support.processes import BrokerProcess, NamesrvProcess

    facts = machine()
    print(f"sparkmq spark {name} bench: {facts}, load average {loadavg()}", file=sys.stderr, flush=True)
    compile_package()
    root = Path(tempfile.mkdtemp(prefix=f"sparkmq-spark-{name}-bench-", dir=bench_root()))
    load_start = loadavg()
    namesrv = NamesrvProcess.start()
    broker = BrokerProcess.start(root / "store", namesrv.address, "--flush", "async")
    bench = SparkBench(facts, root, namesrv, broker, load_start, load_start)
    try:
        yield bench
    finally:
        if bench.spark is not None:
            bench.spark.stop()
        close_views()
        broker.stop()
        namesrv.stop()
        shutil.rmtree(root, ignore_errors=True)
    bench.print()
