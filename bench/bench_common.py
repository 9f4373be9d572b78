"""What every benchmark here shares: where temp stores go and the machine facts printed with results."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from bench_profile import Spy, profile_summary

if TYPE_CHECKING:
    from sparkmq.client import AsyncProducer, AsyncPullConsumer

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 30.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# A broker store that is quick to create: 64 MiB commit-log segments and a small index.
SMALL_STORE = [
    "--set",
    "mapedFileSizeCommitLog=67108864",
    "--set",
    "maxHashSlotNum=50000",
    "--set",
    "maxIndexNum=200000",
]


def run_loop(coro: Awaitable[T], loop: str = "asyncio") -> T:
    """``asyncio.run(coro)`` on asyncio's own loop or, with ``loop="uvloop"``, on uvloop's."""
    factory = None
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def add_loop_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """``--loop asyncio|uvloop`` (default asyncio): the event loop ``help`` names."""
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help=help)


def bench_root() -> Path:
    """A parent for temp dirs on the repository's disk (the system tmp if it is that disk)."""
    system_tmp = Path(tempfile.gettempdir())
    if os.stat(system_tmp).st_dev == os.stat(REPO).st_dev:
        return system_tmp
    local = REPO / ".bench-tmp"
    local.mkdir(exist_ok=True)
    return local


def send_bench_args(doc: str | None) -> argparse.Namespace:
    """The options of a benchmark of sends: ``--quick``, ``--sends``, ``--inflight``, ``--rounds``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    return parser.parse_args()


async def send_windowed(send: Callable[[Any], Awaitable[object]], messages: list[Any], width: int) -> None:
    """``send`` every message, at most ``width`` in flight."""
    pending: set[asyncio.Future[object]] = set()
    for message in messages:
        pending.add(asyncio.ensure_future(send(message)))
        if len(pending) >= width:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    if pending:
        await asyncio.wait(pending)


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def commit() -> str:
    """The short HEAD commit, marked when the work tree has uncommitted changes."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=False
    ).stdout
    return head + (" + uncommitted changes" if dirty.strip() else "")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo."""
    return next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )


def machine() -> dict[str, str]:
    """Date, CPU, cores, Python, platform, commit and load average, for the results' header."""
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "nproc": str(os.cpu_count()),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit(),
        "tmp_dir": str(bench_root()),
        "loadavg_at_start": loadavg(),
    }


def print_machine(info: dict[str, str], end_key: str = "load at end") -> None:
    """The results' header line: ``info`` (from ``machine()``) with the load average now under ``end_key``."""
    info[end_key] = loadavg()
    print(" | ".join(f"{k}: {v}" for k, v in info.items()))


@contextmanager
def temp_root(prefix: str) -> Iterator[Path]:
    """A temporary directory under ``bench_root()``, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=bench_root()))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- a sparkmq dev process and CPU accounting (the client benches) --------------------------
@dataclass
class Row:
    """One measured case."""

    case: str
    size: int
    messages: int
    seconds: float
    broker_cpu: tuple[float, float]  # user, system seconds
    client_cpu: tuple[float, float]
    note: str = ""
    latency_us: list[float] = field(default_factory=list, repr=False)
    kernel: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)  # who → counter → delta

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    def pct(self, p: float) -> float:
        """Nearest-rank percentile in µs (the peers' common.pct)."""
        s = sorted(self.latency_us)
        return s[max(0, min(len(s) - 1, round(p / 100.0 * len(s) + 0.5) - 1))]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def process_cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far, all threads (from ``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS  # utime, stime


def kernel_counters(pid: int) -> dict[str, int]:
    """Counters of process ``pid`` so far: page faults, block-I/O delay, syscalls (whole process) and the
    main thread's ns on CPU, ns waiting for a CPU and voluntary context switches (the thread that serves)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    on_cpu, waiting, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    status = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
    )
    return {
        "minflt": int(fields[7]),
        "majflt": int(fields[9]),
        "blkio_ticks": int(fields[39]),
        "on_cpu_ns": int(on_cpu),
        "wait_ns": int(waiting),
        "vcsw": int(status["voluntary_ctxt_switches"]),
        "syscr": int(io["syscr"]),
        "syscw": int(io["syscw"]),
    }


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    return sum(process_cpu(pid))


class Service:
    """``python -m sparkmq ARGS`` until its first line starting ``ready_prefix``; ``address`` is its last word."""

    def __init__(
        self,
        args: list[str],
        ready_prefix: str,
        env: dict[str, str] | None = None,
        timeout_s: float = READY_TIMEOUT_S,
        python_args: list[str] | None = None,
    ) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **(env or {}))
        self.process = subprocess.Popen(
            [sys.executable, *(python_args or ["-m", "sparkmq"]), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=REPO,
        )
        self.output: list[str] = []
        self.ready_line = self.address = ""
        ready = threading.Event()

        def pump() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line.rstrip("\n"))
                if not self.ready_line and line.startswith(ready_prefix):
                    self.ready_line = line.strip()
                    self.address = line.split()[-1]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout_s) or not self.ready_line:
            self.stop()
            raise RuntimeError(f"sparkmq {args[0]} did not start:\n" + "\n".join(self.output[-30:]))

    def cpu_times(self) -> tuple[float, float]:
        """User and system CPU seconds of the service so far, all threads."""
        return process_cpu(self.process.pid)

    def cpu_seconds(self) -> float:
        """User plus system CPU seconds of the service so far."""
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class DevProcess(Service):
    """``sparkmq dev`` (NameServer + broker) as a subprocess, stopped by its handle."""

    def __init__(self, store_dir: Path) -> None:
        args = ["dev", "--host", "127.0.0.1", "--namesrv-port", "0", "--port", "0", "--flush", "async"]
        super().__init__([*args, "--store-dir", str(store_dir)], "dev namesrv ")
        _, _, self.namesrv, _, self.broker = self.ready_line.split()


def own_cpu_seconds() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _minus(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] - b[0], a[1] - b[1]


class Recorder:
    """Times cases against one ``sparkmq dev`` process: wall time, broker and client CPU, optional py-spy."""

    def __init__(self, dev: DevProcess, tags_keys: bool = False, profile_dir: Path | None = None) -> None:
        self.dev = dev
        self.tags_keys = tags_keys
        self.profile_dir = profile_dir
        self.profiles: list[str] = []
        self.rows: list[Row] = []

    def messages(self, topic: str, count: int, size: int) -> list[Any]:
        """``count`` sparkmq ``Message`` objects of one deterministic random body (the peers' make_body)."""
        from sparkmq.client import Message

        body = random.Random(42).randbytes(size)
        if self.tags_keys:
            return [Message(topic, body, tags="TagA", keys=[f"order-{i}"]) for i in range(count)]
        return [Message(topic, body) for _ in range(count)]

    async def timed(
        self,
        case: str,
        size: int,
        messages: int,
        work: Callable[[], Awaitable[object]],
        note: str = "",
        latency: list[float] | None = None,
        keep: bool = True,
    ) -> Row:
        """Time ``work``: a row of its rate and CPU, kept in :attr:`rows` unless ``keep`` is False."""
        spies = self._spies(case, size)
        pids = {"broker": self.dev.process.pid, "client": os.getpid()}
        counters = {who: kernel_counters(pid) for who, pid in pids.items()}
        broker_cpu, client_cpu = self.dev.cpu_times(), own_cpu_seconds()
        started = time.perf_counter()
        await work()
        seconds = time.perf_counter() - started
        after = {who: kernel_counters(pid) for who, pid in pids.items()}
        row = Row(
            case,
            size,
            messages,
            seconds,
            _minus(self.dev.cpu_times(), broker_cpu),
            _minus(own_cpu_seconds(), client_cpu),
            note,
            latency if latency is not None else [],
            {who: {k: after[who][k] - v for k, v in counters[who].items()} for who in pids},
        )
        self._summarize(spies, row)
        if keep:
            self.rows.append(row)
        print(
            f"  {case:<34} {size:>5} B {row.msgs_per_s:>12,.0f} msgs/s"
            + (f"  p50 {row.pct(50):.0f} µs p99 {row.pct(99):.0f} µs" if row.latency_us else ""),
            file=sys.stderr,
            flush=True,
        )
        return row

    def _spies(self, case: str, size: int) -> list[tuple[str, Spy]]:
        if self.profile_dir is None or size not in (0, 100) or case.startswith("asyncio echo"):
            return []
        stem = "".join(c if c.isalnum() else "-" for c in case.split("(")[0]).strip("-")
        spies = [
            (who, Spy(pid, self.profile_dir / f"{stem}-{who}.txt"))
            for who, pid in (("broker", self.dev.process.pid), ("client", os.getpid()))
        ]
        time.sleep(1.0)  # attach before the clock starts
        return spies

    def _summarize(self, spies: list[tuple[str, Spy]], row: Row) -> None:
        for who, spy in spies:
            spy.stop()
            self.profiles.append(
                f"### {who} during {row.case}, {row.size} B ({row.messages:,} msgs, "
                f"{row.msgs_per_s:,.0f} msgs/s under the sampler)\n"
                + profile_summary(spy.out, row.messages, row.broker_cpu if who == "broker" else row.client_cpu)
            )


def _per_msg(cpu: tuple[float, float], messages: int) -> str:
    user, system = (x / messages * 1e6 for x in cpu)
    return f"{user + system:.1f} ({user:.1f}+{system:.1f})"


def _fmt(x: object) -> str:
    return f"{x:,.1f}" if isinstance(x, (int, float)) else "-"


def table(rows: list[Row]) -> str:
    lines = [
        "| case | body | messages | seconds | msgs/s | MB/s | p50 µs | p99 µs | broker CPU µs/msg "
        "(user+sys) | client CPU µs/msg (user+sys) | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lat = f"{r.pct(50):.0f} | {r.pct(99):.0f}" if r.latency_us else "- | -"
        lines.append(
            f"| {r.case} | {r.size} B | {r.messages:,} | {r.seconds:.2f} | {r.msgs_per_s:,.0f} | "
            f"{r.messages * r.size / r.seconds / 1e6:.1f} | {lat} | {_per_msg(r.broker_cpu, r.messages)} | "
            f"{_per_msg(r.client_cpu, r.messages)} | {r.note} |"
        )
    return "\n".join(lines)


@contextmanager
def recording(root: Path, tags_keys: bool = False, profile_dir: Path | None = None) -> Iterator[Recorder]:
    """A ``Recorder`` on a fresh ``sparkmq dev`` with its store under ``root``, stopped afterwards."""
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
    bench = Recorder(DevProcess(root / "store"), tags_keys, profile_dir)
    try:
        yield bench
    finally:
        bench.dev.stop()


@asynccontextmanager
async def producer_and_consumer(namesrv: str, name: str) -> AsyncIterator[tuple[AsyncProducer, AsyncPullConsumer]]:
    """A started ``AsyncProducer`` (group ``PID_<name>``) and ``AsyncPullConsumer`` (``CID_<name>``), closed after."""
    from sparkmq.client import AsyncProducer, AsyncPullConsumer

    producer = AsyncProducer(f"PID_{name}", namesrv, send_timeout_s=30.0)
    consumer = AsyncPullConsumer(f"CID_{name}", namesrv, auto_commit_interval_s=None)
    await producer.start()
    await consumer.start()
    try:
        yield producer, consumer
    finally:
        await consumer.close()
        await producer.close()
