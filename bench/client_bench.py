"""Client benchmark: sparkmq's own clients over loopback, beside the peers measured in the same run.

Run from the repo root::

    .venv/bin/python bench/client_bench.py                 # sparkmq only, about 1.5 min
    .venv/bin/python bench/client_bench.py --quick         # smoke run, ~15 s
    .venv/bin/python bench/client_bench.py --with-peers    # + Redis Streams and NATS JetStream first, ~3.5 min
    .venv/bin/python bench/client_bench.py --profile DIR --latency-sends 10000   # + py-spy, broker and client

A real ``python -m sparkmq dev`` subprocess (NameServer + broker in one process, ASYNC flush,
production segment sizes, a temporary store on the repository's disk, removed afterwards) is
started; its addresses come from the ready line ``dev namesrv H:P broker H:P``. This ONE process
then measures with sparkmq's public clients, for 100 B and 1 KiB bodies (one deterministic
random body per size, as the peers' scripts use; the properties are what every producer adds,
``WAIT`` and ``UNIQ_KEY``; ``--tags-keys`` adds ``TAGS`` and ``KEYS``):

* ``send x1, 1 in flight``: ``AsyncProducer.send`` one after another; also the send latency;
* ``send x1, N in flight``: ``AsyncProducer.send`` pipelined (``--inflight``, 128);
* ``send_batch 32`` / ``send_batch 256``: ``AsyncProducer.send_batch``, 8 batches in flight;
* ``pull_raw``: ``AsyncPullConsumer.pull_raw`` of everything the batch-256 case wrote, its 4
  queues concurrently, ``maxMessages`` 4096 (the broker's cap), records counted with
  ``record_starts``: no per-message objects (the Spark path);
* ``poll``: ``AsyncPullConsumer.poll(max_messages=4096)`` of the same, every record decoded
  to a ``ReceivedMessage``, body bytes checked;
* ``ping``: ``GET_MAX_OFFSET`` through the consumer, one at a time: client + remoting + broker
  without the store's put;
* ``asyncio echo``: a bare asyncio echo server process, 100 B each way: the loopback and
  event-loop floor on this machine (the peers' ``phys_tcp.py echo``);
* ``Producer.send (blocking)``: the blocking facade, one at a time; latency.

Message objects are built before the clock starts; everything a client does per send (ids,
properties, encoding, routing, the response) is inside it. CPU columns are user + system
seconds per message: the dev process's from /proc (10 ms ticks), this process's from
getrusage (all its threads).

``--with-peers`` first runs ``../shared/peers/run_all.sh`` (``ONLY="versions redis nats"
REPS=1``, ``PEERS_OUT`` a temporary directory, the peers' virtualenv from ``setup.sh``), reads
its raw JSON lines and prints side-by-side tables: throughput ratios and CPU per message.
``--profile DIR`` attaches ``py-spy record --nonblocking`` to the broker and to this process
for each 100 B case and the ping, and prints where the CPU goes per message (see
``profile_summary``). Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench_common import REPO, bench_root, machine, loadavg, short_frame as _where  # noqa: E402 - bench/ is sys.path[0]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from sparkmq.client import AsyncProducer, AsyncPullConsumer, Message, MessageQueue, Producer  # noqa: E402
from sparkmq.errors import TopicNotExistError  # noqa: E402
from sparkmq.message.record import record_starts  # noqa: E402

SIZES = (100, 1024)
BATCH_INFLIGHT = 8
PULL_MAX = 4096  # the broker's maxTransferCountOnMessageInMemory
READY_TIMEOUT_S = 30.0
PEERS_TIMEOUT_S = 1800.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PEERS_DIR = REPO.parent / "shared" / "peers"
PEERS_BASE = Path(os.environ.get("TMPDIR", "/tmp")) / "sparkmq-peers"  # setup.sh's default PEERS_OUT
SPY_RATE = 500
ECHO_SERVER = """
import asyncio, sys
class Echo(asyncio.Protocol):
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.transport.write(data)
async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the bench closes stdin
asyncio.run(main())
"""


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

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    def pct(self, p: float) -> float:
        """Nearest-rank percentile in µs (the peers' common.pct)."""
        s = sorted(self.latency_us)
        return s[max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


# -- processes -----------------------------------------------------------------------------
class DevProcess:
    """``sparkmq dev`` (NameServer + broker) as a subprocess, stopped by its handle."""

    def __init__(self, store_dir: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "sparkmq", "dev", "--host", "127.0.0.1", "--namesrv-port", "0", "--port", "0",
               "--flush", "async", "--store-dir", str(store_dir)]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
        self.output: list[str] = []
        self.namesrv = self.broker = ""
        ready = threading.Event()

        def pump() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line.rstrip("\n"))
                if not self.namesrv and line.startswith("dev namesrv "):
                    _, _, self.namesrv, _, self.broker = line.split()
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(READY_TIMEOUT_S) or not self.namesrv:
            self.stop()
            raise RuntimeError("sparkmq dev did not start:\n" + "\n".join(self.output[-30:]))

    def cpu_seconds(self) -> tuple[float, float]:
        """User and system CPU seconds of the dev process, all threads."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def own_cpu_seconds() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _minus(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] - b[0], a[1] - b[1]


class Spy:
    """``py-spy record`` (non-blocking, raw collapsed stacks) attached to one process for one case."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        spy = Path(sys.executable).with_name("py-spy")
        self.process = subprocess.Popen([str(spy), "record", "--pid", str(pid), "--rate", str(SPY_RATE), "--nonblocking",
                                         "--format", "raw", "--output", str(out)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# Leaf frames where a thread waits (not CPU), and where it is inside a socket syscall (its CPU is
# the process's *system* time, measured separately). Any other leaf is Python work: user time.
WAIT_LEAVES = ("EpollSelector.select", "Condition.wait", "Event.wait", "Thread.join", "Popen._wait")
SYSCALL_LEAVES = ("_SelectorSocketTransport.write ", "_SelectorSocketTransport._read_ready__data_received (asyncio/selector_events.py:995)",
                  "socket.send", "MappedFile.flush", "IndexFile.flush", "StoreCheckpoint.flush")


def profile_summary(collapsed: Path, messages: int, cpu: tuple[float, float], top: int = 14) -> str:
    """Where one process's CPU goes, per message.

    py-spy's non-idle samples on this shared 2-vCPU VM also count time a thread was runnable
    but not running, so sampled µs overstate CPU. Each Python-side sample's share is therefore
    scaled to the process's measured *user* CPU per message ("≈ user µs/msg"); samples inside
    socket syscalls and msync are shown apart, beside the measured *system* CPU.
    """
    if not collapsed.exists():
        return f"(no profile written to {collapsed})"
    us_per_sample = 1e6 / SPY_RATE / messages
    user_us, sys_us = (x / messages * 1e6 for x in cpu)
    buckets: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    syscalls: Counter[str] = Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, n = stack.split(";"), int(count)
        leaf = frames[-1]
        if leaf.startswith(WAIT_LEAVES):
            buckets["waiting"] += n
            continue
        if leaf.startswith(SYSCALL_LEAVES):
            buckets["syscall"] += n
            caller = next((_where(f) for f in reversed(frames) if "sparkmq/" in f), "?")
            syscalls[f"{_where(leaf)} ← {caller}"] += n
            continue
        buckets["python"] += n
        own[_where(leaf, line_too=True)] += n
        for frame in {_where(f) for f in frames if "sparkmq/" in f and "sparkmq/cli" not in f and "__main__" not in f}:
            inclusive[frame] += n
    python = buckets["python"] or 1
    scale = user_us / python
    lines = [f"measured CPU: user {user_us:.2f} + system {sys_us:.2f} µs/msg; sampled (wall, non-idle): Python "
             f"{buckets['python'] * us_per_sample:.2f}, in syscalls {buckets['syscall'] * us_per_sample:.2f}, "
             f"waiting {buckets['waiting'] * us_per_sample:.2f} µs/msg"]
    lines.append("self time, Python (≈ user µs/msg | share):")
    lines += [f"  {n * scale:8.2f} | {100 * n / python:4.1f}%  {f}" for f, n in own.most_common(top)]
    lines.append("inclusive, sparkmq functions, Python part (≈ user µs/msg | share):")
    lines += [f"  {n * scale:8.2f} | {100 * n / python:4.1f}%  {f}" for f, n in inclusive.most_common(top)]
    if syscalls:
        lines.append("syscall samples (sampled µs/msg, ← nearest sparkmq caller):")
        lines += [f"  {n * us_per_sample:8.2f}  {f}" for f, n in syscalls.most_common(5)]
    return "\n".join(lines)



# -- the sparkmq cases ---------------------------------------------------------------------
class Bench:
    def __init__(self, dev: DevProcess, tags_keys: bool, profile_dir: Path | None) -> None:
        self.dev = dev
        self.tags_keys = tags_keys
        self.profile_dir = profile_dir
        self.profiles: list[str] = []
        self.rows: list[Row] = []

    def messages(self, topic: str, count: int, size: int) -> list[Message]:
        body = random.Random(42).randbytes(size)  # the peers' make_body
        if self.tags_keys:
            return [Message(topic, body, tags="TagA", keys=[f"order-{i}"]) for i in range(count)]
        return [Message(topic, body) for _ in range(count)]

    async def timed(self, case: str, size: int, messages: int, work: Callable[[], Awaitable[object]],
                    note: str = "", latency: list[float] | None = None) -> Row:
        spies = self._spies(case, size)
        broker_cpu, client_cpu = self.dev.cpu_seconds(), own_cpu_seconds()
        started = time.perf_counter()
        await work()
        seconds = time.perf_counter() - started
        row = Row(case, size, messages, seconds, _minus(self.dev.cpu_seconds(), broker_cpu), _minus(own_cpu_seconds(), client_cpu),
                  note, latency if latency is not None else [])
        self._summarize(spies, row)
        self.rows.append(row)
        print(f"  {case:<34} {size:>5} B {row.msgs_per_s:>12,.0f} msgs/s"
              + (f"  p50 {row.pct(50):.0f} µs p99 {row.pct(99):.0f} µs" if row.latency_us else ""), file=sys.stderr, flush=True)
        return row

    def _spies(self, case: str, size: int) -> list[tuple[str, Spy]]:
        if self.profile_dir is None or size not in (0, 100) or case.startswith("asyncio echo"):
            return []
        stem = "".join(c if c.isalnum() else "-" for c in case.split("(")[0]).strip("-")
        spies = [(who, Spy(pid, self.profile_dir / f"{stem}-{who}.txt"))
                 for who, pid in (("broker", self.dev.process.pid), ("client", os.getpid()))]
        time.sleep(1.0)  # attach before the clock starts
        return spies

    def _summarize(self, spies: list[tuple[str, Spy]], row: Row) -> None:
        for who, spy in spies:
            spy.stop()
            self.profiles.append(f"### {who} during {row.case}, {row.size} B ({row.messages:,} msgs, "
                                 f"{row.msgs_per_s:,.0f} msgs/s under the sampler)\n"
                                 + profile_summary(spy.out, row.messages, row.broker_cpu if who == "broker" else row.client_cpu))

    async def send_sequential(self, producer: AsyncProducer, messages: list[Message], size: int) -> None:
        samples: list[float] = []

        async def work() -> None:
            for message in messages:
                started = time.perf_counter_ns()
                await producer.send(message)
                samples.append((time.perf_counter_ns() - started) / 1000)

        await self.timed("send x1, 1 in flight (AsyncProducer)", size, len(messages), work, "latency", samples)

    async def send_pipelined(self, producer: AsyncProducer, messages: list[Message], size: int, inflight: int) -> None:
        items = iter(messages)

        async def worker() -> None:
            for message in items:  # one shared iterator: each message is sent once
                await producer.send(message)

        await self.timed(f"send x1, {inflight} in flight", size, len(messages),
                         lambda: asyncio.gather(*(worker() for _ in range(inflight))))

    async def send_batches(self, producer: AsyncProducer, messages: list[Message], size: int, batch: int) -> None:
        batches = iter([messages[i : i + batch] for i in range(0, len(messages), batch)])

        async def worker() -> None:
            for chunk in batches:
                await producer.send_batch(chunk)

        await self.timed(f"send_batch {batch}, {BATCH_INFLIGHT} in flight", size, len(messages),
                         lambda: asyncio.gather(*(worker() for _ in range(BATCH_INFLIGHT))))

    async def pull_raw(self, consumer: AsyncPullConsumer, queues: list[MessageQueue], size: int, expected: int) -> None:
        counts: list[int] = []

        async def one_queue(queue: MessageQueue) -> int:
            offset, count = 0, 0
            for _ in range(expected // 64 + 100):  # bounded: a pull returns at least one message
                result = await consumer.pull_raw(queue, offset, PULL_MAX)
                if not result.found:
                    break
                count += len(record_starts(result.body))
                offset = result.next_begin_offset
            return count

        async def work() -> None:
            counts.extend(await asyncio.gather(*(one_queue(q) for q in queues)))

        await self.timed(f"pull_raw {PULL_MAX}, record_starts", size, expected, work, f"{len(queues)} queues concurrently")
        if sum(counts) != expected:
            raise RuntimeError(f"pull_raw read {sum(counts)} messages, expected {expected}")

    async def poll(self, consumer: AsyncPullConsumer, size: int, expected: int) -> None:
        got: list[int] = [0, 0]

        async def work() -> None:
            for _ in range(expected // 64 + 100):  # bounded
                messages = await consumer.poll(timeout_s=0.0, max_messages=PULL_MAX)
                if not messages:
                    break
                got[0] += len(messages)
                got[1] += sum(len(m.body) for m in messages)

        await self.timed(f"poll {PULL_MAX} → ReceivedMessage", size, expected, work, "queues in turn")
        if got[0] != expected or got[1] != expected * size:
            raise RuntimeError(f"poll read {got[0]} messages / {got[1]} body bytes, expected {expected}")

    async def ping(self, consumer: AsyncPullConsumer, queue: MessageQueue, count: int) -> None:
        samples: list[float] = []

        async def work() -> None:
            for _ in range(count):
                started = time.perf_counter_ns()
                await consumer.max_offset(queue)
                samples.append((time.perf_counter_ns() - started) / 1000)

        await self.timed("ping: GET_MAX_OFFSET, 1 in flight", 0, count, work, "round-trip floor", samples)


async def echo_floor(bench: Bench, count: int) -> None:
    """A bare asyncio echo server process and a stream client, 100 B each way: the loopback +
    event-loop round-trip floor on this machine (the peers' ``phys_tcp.py echo``)."""
    server = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        payload, samples = bytes(100), []

        async def work() -> None:
            for _ in range(count):
                started = time.perf_counter_ns()
                writer.write(payload)
                await reader.readexactly(len(payload))
                samples.append((time.perf_counter_ns() - started) / 1000)

        for _ in range(100):  # warm-up
            writer.write(payload)
            await reader.readexactly(len(payload))
        await bench.timed("asyncio echo 100 B, 1 in flight", 100, count, work, "loopback + event-loop floor; broker CPU n/a",
                          samples)
        writer.close()
        await writer.wait_closed()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


async def subscribed_queues(consumer: AsyncPullConsumer, topic: str) -> list[MessageQueue]:
    for _ in range(100):  # the broker re-registers a new topic with the NameServer right away; allow a moment
        try:
            return await consumer.queues_of(topic)
        except TopicNotExistError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"topic {topic} never reached the NameServer")


async def async_cases(bench: Bench, scale: int, inflight: int, n_latency: int) -> None:
    namesrv = bench.dev.namesrv
    producer = AsyncProducer("PID_CLIENT_BENCH", namesrv, send_timeout_s=30.0)
    consumer = AsyncPullConsumer("CID_CLIENT_BENCH", namesrv, auto_commit_interval_s=None)
    await producer.start()
    await consumer.start()
    try:
        for size in SIZES:
            n_seq, n_pipe = n_latency // scale, 20_000 // scale
            n32, n256 = (102_400 if size == 100 else 51_200) // scale, (204_800 if size == 100 else 102_400) // scale
            for tag, _count in (("Seq", n_seq), ("Pipe", n_pipe), ("B32", n32), ("B256", n256)):  # auto-create, warm up
                topic = f"ClientBench{tag}{size}"
                warm = bench.messages(topic, 8, size)
                await producer.send_batch(warm)
                for m in warm[:4]:
                    await producer.send(m)
            await bench.send_sequential(producer, bench.messages(f"ClientBenchSeq{size}", n_seq, size), size)
            await bench.send_pipelined(producer, bench.messages(f"ClientBenchPipe{size}", n_pipe, size), size, inflight)
            await bench.send_batches(producer, bench.messages(f"ClientBenchB32{size}", n32, size), size, 32)
            await bench.send_batches(producer, bench.messages(f"ClientBenchB256{size}", n256, size), size, 256)
            topic = f"ClientBenchB256{size}"
            queues = await subscribed_queues(consumer, topic)
            await bench.pull_raw(consumer, queues, size, n256 + 12)
            await consumer.assign(queues)
            for queue in queues:
                consumer.seek(queue, 0)
            await bench.poll(consumer, size, n256 + 12)
        queue = (await subscribed_queues(consumer, "ClientBenchSeq100"))[0]
        await consumer.max_offset(queue)
        await bench.ping(consumer, queue, n_latency // scale)
        await echo_floor(bench, n_latency // scale)
    finally:
        await consumer.close()
        await producer.close()


def blocking_cases(bench: Bench, scale: int, n_latency: int) -> None:
    """``Producer.send`` from this (non-loop) thread: the blocking facade's latency."""
    with Producer("PID_CLIENT_BENCH_BLOCKING", bench.dev.namesrv, send_timeout_s=30.0) as producer:
        for size in SIZES:
            messages = bench.messages(f"ClientBenchBlock{size}", n_latency // scale, size)
            for m in messages[:20]:  # auto-create, warm up
                producer.send(m)
            samples: list[float] = []

            async def work(messages: list[Message] = messages, samples: list[float] = samples) -> None:
                for message in messages:
                    started = time.perf_counter_ns()
                    producer.send(message)
                    samples.append((time.perf_counter_ns() - started) / 1000)

            asyncio.run(bench.timed("Producer.send (blocking), 1 in flight", size, len(messages), work, "latency", samples))


# -- peers ---------------------------------------------------------------------------------
def run_peers(out: Path, only: str, reps: int, python: Path) -> tuple[list[dict], str]:
    """Run the peers' run_all.sh into ``out``; its raw JSON records and versions text."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "venv").symlink_to(python.parent.parent)
    cached = PEERS_BASE / "bin" / "natsbench"  # the Go client setup.sh's first run_all.sh built; else built here
    if cached.exists():
        (out / "bin").mkdir()
        (out / "bin" / "natsbench").symlink_to(cached)
    env = dict(os.environ, PEERS_OUT=str(out), PY=str(python), ONLY=f"versions {only}", REPS=str(reps), STAMP="clientbench")
    process = subprocess.Popen(["bash", str(PEERS_DIR / "run_all.sh")], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        code = process.wait(PEERS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # run_all.sh's trap stops the servers it started, by PID
        process.wait(60)
        raise
    results = out / "raw" / "results-clientbench.jsonl"
    if code != 0 or not results.exists():
        log = out / "raw" / "run-clientbench.log"
        tail = log.read_text().splitlines()[-30:] if log.exists() else []
        raise RuntimeError(f"run_all.sh exited {code}:\n" + "\n".join(tail))
    versions = out / "raw" / "versions-clientbench.txt"
    return ([json.loads(line) for line in results.read_text().splitlines() if line.strip()],
            versions.read_text() if versions.exists() else "")


# (column label, peer, test for produce, consume, latency); redis rows from the appendfsync=everysec runs
PEER_COLUMNS = (
    ("NATS JS, Go", "nats-js", "publish_go_async1000", "consume_go_fetch1000", "latency_go_sync_publish"),
    ("NATS JS, nats-py", "nats-js", "publish_*", "consume_fetch1000", "latency_sync_publish"),
    ("Redis, redis-benchmark (C)", "redis", "publish_redis-benchmark_c1_P1000", None, None),
    ("Redis, redis-py", "redis", "publish_pipe1000", "consume_xread1000", "latency_sync_xadd"),
)


def peer_record(records: list[dict], peer: str, test: str | None, size: int) -> dict | None:
    """The record of ``test`` (``publish_*``: the fastest publish style); redis only at appendfsync everysec."""
    if test is None:
        return None
    found = [r for r in records if r["peer"] == peer and r["size"] == size
             and (r["test"] == test or (test.endswith("*") and r["test"].startswith(test[:-1]) and "_go_" not in r["test"]))
             and r.get("appendfsync", "everysec") == "everysec"]
    return max(found, key=lambda r: r.get("msgs_per_s") or 0, default=None)


def side_by_side(rows: list[Row], records: list[dict]) -> str:
    head = "| sparkmq case | body | sparkmq msgs/s | " + " | ".join(f"{c[0]} msgs/s | ×" for c in PEER_COLUMNS) + " |"
    lines = [head, "|---|---|---:|" + "---:|---:|" * len(PEER_COLUMNS)]
    for row in rows:
        kind = "consume" if row.case.startswith(("pull", "poll")) else "produce" if not row.latency_us else None
        if kind is None:
            continue
        cells = []
        for _label, peer, produce, consume, _lat in PEER_COLUMNS:
            rec = peer_record(records, peer, produce if kind == "produce" else consume, row.size)
            rate = rec.get("msgs_per_s") if rec else None
            cells.append(f"{rate:,.0f} | {row.msgs_per_s / rate:.2f}×" if rate else "- | -")
        lines.append(f"| {row.case} | {row.size} B | **{row.msgs_per_s:,.0f}** | " + " | ".join(cells) + " |")
    lines += ["", "CPU per message, server + client (µs; × = peer ÷ sparkmq, above 1 means sparkmq spends less):", "",
              "| sparkmq case | body | sparkmq broker+client | " + " | ".join(f"{c[0]} | ×" for c in PEER_COLUMNS) + " |",
              "|---|---|---:|" + "---:|---:|" * len(PEER_COLUMNS)]
    for row in rows:
        kind = "consume" if row.case.startswith(("pull", "poll")) else "produce" if not row.latency_us else None
        if kind is None:
            continue
        ours = (sum(row.broker_cpu) + sum(row.client_cpu)) / row.messages * 1e6
        cells = []
        for _label, peer, produce, consume, _lat in PEER_COLUMNS:
            rec = peer_record(records, peer, produce if kind == "produce" else consume, row.size)
            theirs = (rec.get("server_us_per_msg") or 0) + (rec.get("client_us_per_msg") or 0) if rec else 0
            note = "" if not rec or rec.get("client_us_per_msg") is not None else " (server only)"
            cells.append(f"{theirs:.1f}{note} | {theirs / ours:.2f}×" if theirs else "- | -")
        lines.append(f"| {row.case} | {row.size} B | {ours:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "| latency, 1 in flight | body | p50 µs | p99 µs | max µs |", "|---|---|---:|---:|---:|"]
    for row in rows:
        if row.latency_us:
            body = f"{row.size} B" if row.size else "-"
            lines.append(f"| sparkmq {row.case} | {body} | {row.pct(50):.0f} | **{row.pct(99):.0f}** "
                         f"| {max(row.latency_us):,.0f} |")
    for size in SIZES:
        for label, peer, _p, _c, lat in PEER_COLUMNS:
            rec = peer_record(records, peer, lat, size)
            if rec:
                lines.append(f"| {label}: {rec['test']} | {size} B | {rec['p50_us']:.0f} | {rec['p99_us']:.0f} "
                             f"| {rec['max_us']:,.0f} |")
    return "\n".join(lines)


def targets(rows: list[Row], records: list[dict]) -> str:
    def row_of(prefix: str) -> Row | None:
        return next((r for r in rows if r.case.startswith(prefix) and r.size == 100), None)

    lines = ["| target (100 B) | sparkmq | reference | ratio | met? |", "|---|---:|---:|---:|---|"]
    for what, prefix, test in (("send_batch 256 ≥ 1.0× NATS Go publish", "send_batch 256", "publish_go_async1000"),
                               ("consume (pull_raw) ≥ 1.0× NATS Go fetch", "pull_raw", "consume_go_fetch1000"),
                               ("consume (poll → objects) ≥ 1.0× NATS Go fetch", "poll", "consume_go_fetch1000")):
        row, rec = row_of(prefix), peer_record(records, "nats-js", test, 100)
        if row is None:
            continue
        if rec:
            ratio = row.msgs_per_s / rec["msgs_per_s"]
            met = "yes" if ratio >= 1 else "no"
            lines.append(f"| {what} | {row.msgs_per_s:,.0f} | {rec['msgs_per_s']:,.0f} | {ratio:.2f}× | {met} |")
        else:
            lines.append(f"| {what} | {row.msgs_per_s:,.0f} | (no peers run) | - | - |")
    for prefix in ("send x1, 1 in flight", "Producer.send"):
        row = row_of(prefix)
        if row is not None:
            p99 = row.pct(99)
            met = "yes" if p99 <= 250 else "no"
            lines.append(f"| {row.case}: p99 ≤ 250 µs | {p99:.0f} µs | 250 µs | {p99 / 250:.2f}× | {met} |")
    return "\n".join(lines)


def peers_table(records: list[dict]) -> str:
    lines = ["| peer | test | client | body | msgs | msgs/s | p50 µs | p99 µs | server µs/msg | client µs/msg | config |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        if r.get("peer") not in ("redis", "nats-js"):
            continue
        rate = f"{r['msgs_per_s']:,.0f}" if r.get("msgs_per_s") else "-"
        client = r.get("client", "").split(" (")[0]
        storage = "appendfsync " + r["appendfsync"] if "appendfsync" in r else r.get("storage", "")
        lines.append(f"| {r['peer']} | {r['test']} | {client} | {r['size']} B | {r['count']:,} | {rate} | "
                     f"{_fmt(r.get('p50_us'))} | {_fmt(r.get('p99_us'))} | {_fmt(r.get('server_us_per_msg'))} | "
                     f"{_fmt(r.get('client_us_per_msg'))} | {storage} |")
    return "\n".join(lines)


def _per_msg(cpu: tuple[float, float], messages: int) -> str:
    user, system = (x / messages * 1e6 for x in cpu)
    return f"{user + system:.1f} ({user:.1f}+{system:.1f})"


def _fmt(x: object) -> str:
    return f"{x:,.1f}" if isinstance(x, (int, float)) else "-"


def table(rows: list[Row]) -> str:
    lines = ["| case | body | messages | seconds | msgs/s | MB/s | p50 µs | p99 µs "
             "| broker CPU µs/msg (user+sys) | client CPU µs/msg (user+sys) | note |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lat = f"{r.pct(50):.0f} | {r.pct(99):.0f}" if r.latency_us else "- | -"
        lines.append(f"| {r.case} | {r.size} B | {r.messages:,} | {r.seconds:.2f} | {r.msgs_per_s:,.0f} | "
                     f"{r.messages * r.size / r.seconds / 1e6:.1f} | {lat} | {_per_msg(r.broker_cpu, r.messages)} | "
                     f"{_per_msg(r.client_cpu, r.messages)} | {r.note} |")
    return "\n".join(lines)


# -- driver --------------------------------------------------------------------------------






def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    parser.add_argument("--inflight", type=int, default=128, help="pipelined single sends in flight (default 128)")
    parser.add_argument("--tags-keys", action="store_true", help="give every message TAGS and KEYS")
    parser.add_argument("--with-peers", action="store_true", help="run ../shared/peers/run_all.sh first (ONLY=redis nats)")
    parser.add_argument("--peers-only", default="redis nats", help="the peers' ONLY (default: redis nats)")
    parser.add_argument("--peers-reps", type=int, default=1, help="the peers' REPS (default 1)")
    parser.add_argument("--peers-python", type=Path, default=PEERS_BASE / "venv" / "bin" / "python",
                        help="python of the peers' virtualenv (setup.sh)")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy broker and client during the 100 B cases")
    parser.add_argument("--latency-sends", type=int, default=2000,
                        help="sends (and pings, echoes) per latency case (default 2000; more gives the profiles more samples)")
    parser.add_argument("--json", type=Path, help="write every row and peer record here")
    args = parser.parse_args(argv)
    info = machine()
    info["load at start"] = loadavg()
    print(f"sparkmq client bench: {info['date']}, {info['cpu']} x {info['nproc']}, load {info['load at start']}", file=sys.stderr)
    root = Path(tempfile.mkdtemp(prefix="sparkmq-client-bench-", dir=bench_root()))
    records: list[dict] = []
    versions = ""
    try:
        if args.with_peers:
            print(f"peers: {args.peers_only} via {PEERS_DIR / 'run_all.sh'} ...", file=sys.stderr, flush=True)
            records, versions = run_peers(root / "peers", args.peers_only, args.peers_reps, args.peers_python)
            info["load after peers"] = loadavg()
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        dev = DevProcess(root / "store")
        bench = Bench(dev, args.tags_keys, args.profile)
        try:
            scale = 10 if args.quick else 1
            asyncio.run(async_cases(bench, scale, args.inflight, args.latency_sends))
            blocking_cases(bench, scale, args.latency_sends)
        finally:
            dev.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    info["load at end"] = loadavg()
    print(" | ".join(f"{k}: {v}" for k, v in info.items()))
    print("\n## sparkmq\n\n" + table(bench.rows))
    if records:
        print("\n## side by side (peers measured in this run)\n\n" + side_by_side(bench.rows, records))
        print("\n## peers, every record\n\n" + peers_table(records))
    print("\n## targets\n\n" + targets(bench.rows, records))
    if bench.profiles:
        print(f"\n## profiles (py-spy, non-blocking, {SPY_RATE} Hz)\n\n" + "\n\n".join(bench.profiles))
    if versions:
        print("\n## peer versions\n\n```\n" + versions.rstrip() + "\n```")
    if args.json:
        rows = [dict(asdict(r), msgs_per_s=r.msgs_per_s, p50_us=r.pct(50) if r.latency_us else None,
                     p99_us=r.pct(99) if r.latency_us else None, latency_us=None) for r in bench.rows]
        args.json.write_text(json.dumps({"machine": info, "sparkmq": rows, "peers": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
