"""Client scale benchmark: single-send throughput as queues and connections grow (issue 10's "flat ±10 %").

Run from the repo root::

    .venv/bin/python bench/client_scale_bench.py --quick         # 2,000 sends a case, ~1 min
    .venv/bin/python bench/client_scale_bench.py --sends 20000   # full counts, for a quiet machine
    .venv/bin/python bench/client_scale_bench.py --sends 100000 --loop uvloop   # the client on uvloop, as client_bench
    .venv/bin/python bench/client_scale_bench.py --sends 100000 --loop uvloop --repeat 5  # medians of 5 rounds
    .venv/bin/python bench/client_scale_bench.py --sends 600000 --loop uvloop --queues 1 --connections 1 10 100 \
        --inflight-per-connection 128 --fresh-messages --client-processes 2 --repeat 9   # the loaded shape (issue 10)
    .venv/bin/python bench/client_scale_bench.py --quick --profile DIR  # + py-spy per case

Against one fresh ``sparkmq dev`` (ASYNC flush), 100 B bodies, ``--inflight`` (128) single
sends in flight in this one process:

* **queues**: one producer, one connection, a topic created with 1, 10, 100 and 1,000 queues
  (UPDATE_AND_CREATE_TOPIC), one warm-up message to every queue (its first creates the queue's
  ConsumeQueue file), then sends round-robin over all of them;
* **connections**: 1, 10 and 100 producers (each its own ClientInstance, so its own broker
  connection) on one 4-queue topic, the in-flight sends spread evenly over them (the thin shape:
  at 100 connections ~1.3 sends per connection per round trip, so every send is a read, a write
  and a wake-up on each side, the syscall floor of "Many connections" in docs/design-notes.md);
  with ``--inflight-per-connection K`` every connection carries K sends in flight instead (the
  loaded shape: N producers each pushing as hard as one does alone, K × N in flight in all).

Two options make the connections cases look more like a real many-connection load (every shape is
reported beside the others; docs/design-notes.md, "Which shape measures what", says what each measures):

* ``--fresh-messages``: each send builds its ``Message`` (as applications do) instead of taking it from
  ``--sends`` messages built before the clock starts; 100,000 pre-built messages are 100,000 objects every
  full collection of the client's garbage collector walks.
* ``--client-processes P``: the N producers are spread over P client processes (N/P each, the in-flight
  sends and the ``--sends`` split in proportion); msgs/s is the aggregate, the client's CPU is every
  process's summed. One Python process holding all N connections and K × N sends in flight measures that
  one process as much as the broker.

Every case also measures a **steady window**: each client process notes (time, sends taken, its own CPU, the
broker's CPU) every 1 % of its sends; the window runs from when every process has taken its in-flight sends
plus 10 % (all workers running, the ramp of creating K x N Tasks behind it) to when the first process has
taken 90 % (none has started to drain yet), and gives msgs/s and CPU per message inside it (the broker's from
``/proc/<pid>/task/*/schedstat``, ns). The whole-case columns stay as they were (comparable with older runs);
"alone" is the share of a multi-process case's wall time in which some process had finished already.

Each case prints msgs/s, its ratio to the 1-queue / 1-connection case of the same run, the broker's and
the client's CPU µs per message (on a shared machine compare the CPU columns: throughput moves with the
neighbours' load), and the client's garbage collections (generations 0 / 1 / 2) inside the timed case.
The closing "flatness" table gives, per case, each round's ratio to the same round's first case of its
dimension (1 queue, 1 connection), median and range over the rounds: rounds are interleaved, so a
load change between rounds cancels; on 2 shared vCPUs single rounds scatter ±20 %, so take ≥ 9.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import itertools
import multiprocessing
import os
import random
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path

from bench_common import (
    CLOCK_TICKS,
    REPO,
    Recorder,
    Row,
    add_loop_argument,
    machine,
    print_machine,
    recording,
    run_loop,
    temp_root,
)

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from sparkmq.client import AsyncProducer, Message
from sparkmq.client.responses import check_response
from sparkmq.errors import TopicNotExistError
from sparkmq.protocol import RequestCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader
from sparkmq.remoting import RemotingClient

QUEUE_COUNTS = (1, 10, 100, 1000)
CONNECTION_COUNTS = (1, 10, 100)
READ_WRITE = 6  # PermName.PERM_READ | PERM_WRITE
ROUTE_WAIT_S = 30.0
BODY = random.Random(42).randbytes(100)  # Recorder.messages' body
#: the client's garbage collections (generations 0, 1, 2) inside each timed case, by id(row)
COLLECTIONS: dict[int, tuple[int, int, int]] = {}
#: each timed case's steady window, by id(row)
WINDOWS: dict[int, Window] = {}
MARKS_PER_CASE = 100  # progress marks per process and case (every 1 % of its sends)
#: (monotonic s, sends taken so far, this process's CPU s, the broker's CPU s)
Mark = tuple[float, int, float, float]


@dataclasses.dataclass(frozen=True)
class Window:
    """A case's steady window: messages, seconds, client and broker CPU seconds inside it, and the share of
    the case's wall time in which some client process had finished already (0 for one process)."""

    messages: int
    seconds: float
    client_cpu: float
    broker_cpu: float
    alone: float

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds


def broker_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of ``pid`` so far, at ns resolution (``/proc/<pid>/task/*/schedstat``)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except FileNotFoundError:  # a thread that just ended
            continue
    return total / 1e9


def marked(items: Sequence[object], marks: list[Mark], broker_pid: int) -> Iterator[object]:
    """``items`` in order, a :data:`Mark` appended every 1 % of them (and once after the last): one
    chunk of a plain iterator per mark, so taking an item costs what iterating the sequence does."""
    step = max(1, len(items) // MARKS_PER_CASE)

    def chunks() -> Iterator[Sequence[object]]:
        for start in range(0, len(items), step):
            marks.append((time.monotonic(), start, time.process_time(), broker_cpu_s(broker_pid)))
            yield items[start : start + step]
        marks.append((time.monotonic(), len(items), time.process_time(), broker_cpu_s(broker_pid)))

    return itertools.chain.from_iterable(chunks())


def _at(marks: list[Mark], x: float, by: int, field: int) -> float:
    """``field`` of ``marks`` where field ``by`` equals ``x``, linearly between the marks around it."""
    for before, after in itertools.pairwise(marks):
        if before[by] <= x <= after[by]:
            span = after[by] - before[by]
            share = 0.0 if span == 0 else (x - before[by]) / span
            return before[field] + share * (after[field] - before[field])
    raise ValueError(f"{x} outside the marks")


def steady_window(runs: list[tuple[list[Mark], int, int]]) -> Window | None:
    """The steady window of processes' ``(marks, sends, in flight)``, or None when the case is too short
    (fewer sends than in flight plus 20 %)."""
    starts, ends = [], []
    for marks, sends, inflight in runs:
        first, last = inflight + sends // 10, sends * 9 // 10
        if first >= last or len(marks) < 2:
            return None
        starts.append(_at(marks, first, 1, 0))
        ends.append(_at(marks, last, 1, 0))
    t0, t1 = max(starts), min(ends)
    if t1 <= t0:
        return None
    messages = sum(_at(m, t1, 0, 1) - _at(m, t0, 0, 1) for m, _, _ in runs)
    client = sum(_at(m, t1, 0, 2) - _at(m, t0, 0, 2) for m, _, _ in runs)
    broker_marks = runs[0][0]
    broker = _at(broker_marks, t1, 0, 3) - _at(broker_marks, t0, 0, 3)
    finished = [m[-1][0] for m, _, _ in runs]
    begun = min(m[0][0] for m, _, _ in runs)
    alone = (max(finished) - min(finished)) / (max(finished) - begun) if len(runs) > 1 else 0.0
    return Window(round(messages), t1 - t0, client, broker, alone)


class Collections:
    """Counts this process's garbage collections per generation while it is entered."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]

    def _count(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            self.counts[info["generation"]] += 1

    def __enter__(self) -> Collections:
        gc.callbacks.append(self._count)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self._count)


async def create_topic(broker: str, topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC with ``queues`` read and write queues."""
    client = RemotingClient()
    try:
        header = CreateTopicRequestHeader(topic, "TBW102", queues, queues, READ_WRITE, "SINGLE_TAG", False)
        check_response(
            await client.invoke(broker, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_fields()), f"create {topic}"
        )
    finally:
        await client.close()


async def wait_for_queues(producer: AsyncProducer, topic: str, queues: int) -> None:
    """Until the NameServer routes ``topic`` with all its queues (the broker registers it at once)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ROUTE_WAIT_S
    while loop.time() < deadline:
        try:
            route = await producer.instance.route(topic, refresh=True)
        except TopicNotExistError:  # not registered with the NameServer yet
            route = None
        if route is not None and len(route.publish_queues()) == queues:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{topic} was not routed with {queues} queues within {ROUTE_WAIT_S} s")


def sends_work(
    producers: list[AsyncProducer],
    topic: str,
    sends: int,
    inflight: int,
    fresh: bool,
    marks: list[Mark] | None = None,
    broker_pid: int = 0,
) -> Callable[[], Awaitable[object]]:
    """``sends`` single sends of 100 B, ``inflight`` at a time, worker k on producer k mod len(producers);
    with ``fresh`` each send builds its message, else they are all built now (before any clock starts);
    with ``marks`` the sends taken are marked as :func:`marked` does.

    At least one worker per producer: with more producers than ``inflight`` each has one.
    """
    if fresh:
        left: Iterator[object] = iter(range(sends)) if marks is None else marked(range(sends), marks, broker_pid)

        async def worker(producer: AsyncProducer) -> None:
            for _ in left:  # one shared iterator: sends in all
                await producer.send(Message(topic, BODY))

    else:
        built = [Message(topic, BODY) for _ in range(sends)]
        messages = iter(built) if marks is None else marked(built, marks, broker_pid)

        async def worker(producer: AsyncProducer) -> None:
            for message in messages:  # one shared iterator: each message is sent once
                await producer.send(message)

    count = max(inflight, len(producers))
    return lambda: asyncio.gather(*(worker(producers[k % len(producers)]) for k in range(count)))


async def warm_up(producers: list[AsyncProducer], topic: str, inflight: int) -> None:
    """Connect every producer, then one message to every queue of ``topic``."""
    for producer in producers:  # connect and warm up every producer first
        await producer.send(Message(topic, b"warm-up"))
    # One message to every queue first: a queue's first message creates its ConsumeQueue file,
    # a one-off cost that would swamp 2 sends per queue at 1,000 queues.
    queues = iter((await producers[0].instance.route(topic)).publish_queues())

    async def warm(producer: AsyncProducer) -> None:
        for queue in queues:
            await producer.send(Message(topic, b"warm-up"), queue=queue)

    await asyncio.gather(*(warm(producers[k % len(producers)]) for k in range(inflight)))


async def timed_sends(
    bench: Recorder,
    case: str,
    producers: list[AsyncProducer],
    topic: str,
    sends: int,
    inflight: int,
    note: str,
    fresh: bool = False,
) -> Row:
    """Warm up, then time ``sends_work`` in this process."""
    await warm_up(producers, topic, inflight)
    marks: list[Mark] = []
    work = sends_work(producers, topic, sends, inflight, fresh, marks, bench.dev.process.pid)
    with Collections() as collections:
        row = await bench.timed(case, 100, sends, work, note)
    COLLECTIONS[id(row)] = (collections.counts[0], collections.counts[1], collections.counts[2])
    window = steady_window([(marks, sends, max(inflight, len(producers)))])
    if window is not None:
        WINDOWS[id(row)] = window
    return row


def client_process(
    pipe: Connection, namesrv: str, topic: str, first: int, connections: int, sends: int, inflight: int, options: dict
) -> None:
    """One client process of ``--client-processes``: ``connections`` producers, warmed up; on "go" its
    ``sends``, then its CPU seconds (user, system) and collections for the timed part down ``pipe``."""

    async def run() -> None:
        producers = [
            AsyncProducer(f"PID_SCALE_BENCH_{first + i}", namesrv, send_timeout_s=30.0) for i in range(connections)
        ]
        try:
            for producer in producers:
                await producer.start()
            await wait_for_queues(producers[0], topic, 4)
            await warm_up(producers, topic, inflight)
            marks: list[Mark] = []
            work = sends_work(producers, topic, sends, inflight, options["fresh"], marks, options["broker_pid"])
            loop = asyncio.get_running_loop()
            pipe.send("ready")
            await loop.run_in_executor(None, pipe.recv)  # "go"
            with Collections() as collections:
                before = resource.getrusage(resource.RUSAGE_SELF)
                await work()
                after = resource.getrusage(resource.RUSAGE_SELF)
            marks.append((time.monotonic(), sends, time.process_time(), broker_cpu_s(options["broker_pid"])))
            cpu = (after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)
            pipe.send((cpu, collections.counts, (marks, sends, max(inflight, connections))))
        finally:
            await asyncio.gather(*(p.close() for p in producers))

    run_loop(run(), options["loop"])


async def timed_processes(
    bench: Recorder, case: str, topic: str, connections: int, processes: int, sends: int, total: int, options: dict
) -> Row:
    """``connections`` producers spread over ``processes`` client processes, ``total`` sends in flight and
    ``sends`` in all split in proportion; the row's client CPU is every process's summed (and this one's)."""
    context = multiprocessing.get_context("spawn")
    children = []
    first = 0
    for p in range(processes):
        share = connections // processes + (p < connections % processes)
        mine, theirs = context.Pipe()
        child = context.Process(
            target=client_process,
            args=(
                theirs,
                bench.dev.namesrv,
                topic,
                first,
                share,
                sends * share // connections,
                max(1, total * share // connections),
                options,
            ),
            daemon=True,
        )
        child.start()
        children.append((child, mine))
        first += share
    loop = asyncio.get_running_loop()
    try:
        for _, pipe in children:
            if await loop.run_in_executor(None, pipe.recv) != "ready":
                raise RuntimeError("a client process did not get ready")
        reports: list[tuple[tuple[float, float], list[int], tuple[list[Mark], int, int]]] = []

        async def go() -> None:
            for _, pipe in children:
                pipe.send("go")
            reports.extend(await asyncio.gather(*(loop.run_in_executor(None, pipe.recv) for _, pipe in children)))

        messages = sum(
            sends * (connections // processes + (p < connections % processes)) // connections for p in range(processes)
        )
        row = await bench.timed(case, 100, messages, go, f"{processes} client processes")
    finally:
        for child, _ in children:
            child.join(60)
    user = row.client_cpu[0] + sum(cpu[0] for cpu, _, _ in reports)
    system = row.client_cpu[1] + sum(cpu[1] for cpu, _, _ in reports)
    row = dataclasses.replace(row, client_cpu=(user, system))
    COLLECTIONS[id(row)] = (
        sum(c[0] for _, c, _ in reports),
        sum(c[1] for _, c, _ in reports),
        sum(c[2] for _, c, _ in reports),
    )
    window = steady_window([run for _, _, run in reports])  # the processes' CPU only: this one just waits
    if window is not None:
        WINDOWS[id(row)] = window
    return row


async def scale_cases(
    bench: Recorder,
    sends: int,
    inflight: int,
    queue_counts: Sequence[int],
    connection_counts: Sequence[int],
    inflight_per_connection: int | None = None,
    fresh: bool = False,
    processes: int | None = None,
    loop: str = "asyncio",
) -> list[tuple[str, int, Row]]:
    results: list[tuple[str, int, Row]] = []
    producer = AsyncProducer("PID_SCALE_BENCH", bench.dev.namesrv, send_timeout_s=30.0)
    await producer.start()
    try:
        # Not reported: the run's first case was cheaper than every later one whatever its shape
        # (branch queues1k3: the kernel's first-touch zeroing of CommitLog pages lands on the cases
        # after it), so a case shaped like the baseline goes first and no reported case is first.
        await create_topic(bench.dev.broker, "ScaleWarmUp", 1)
        await wait_for_queues(producer, "ScaleWarmUp", 1)
        await timed_sends(bench, "warm-up, not reported", [producer], "ScaleWarmUp", sends, inflight, "warm-up", fresh)
        for queues in queue_counts:
            topic = f"ScaleQueues{queues}"
            await create_topic(bench.dev.broker, topic, queues)
            await wait_for_queues(producer, topic, queues)
            row = await timed_sends(
                bench, f"{queues} queues, 1 connection", [producer], topic, sends, inflight, "one topic", fresh
            )
            results.append(("queues", queues, row))
    finally:
        await producer.close()
    topic = "ScaleConnections"
    await create_topic(bench.dev.broker, topic, 4)
    for connections in connection_counts:
        total = inflight if inflight_per_connection is None else inflight_per_connection * connections
        if processes is not None:
            row = await timed_processes(
                bench,
                f"4 queues, {connections} connections, {processes} client processes",
                topic,
                connections,
                min(processes, connections),
                sends,
                total,
                {"fresh": fresh, "loop": loop, "broker_pid": bench.dev.process.pid},
            )
            results.append(("connections", connections, row))
            continue
        producers = [
            AsyncProducer(f"PID_SCALE_BENCH_{i}", bench.dev.namesrv, send_timeout_s=30.0) for i in range(connections)
        ]
        try:
            for producer in producers:
                await producer.start()
            await wait_for_queues(producers[0], topic, 4)
            row = await timed_sends(
                bench,
                f"4 queues, {connections} connections",
                producers,
                topic,
                sends,
                total,
                f"{connections} producers, {total:,} in flight",
                fresh,
            )
            results.append(("connections", connections, row))
        finally:
            await asyncio.gather(*(p.close() for p in producers))
    return results


def medians(rounds: list[list[tuple[str, int, Row]]]) -> list[tuple[str, int, Row]]:
    """Per case, the round whose msgs/s is the median (the lower middle for an even count)."""
    out = []
    for i, (dimension, n, _) in enumerate(rounds[0]):
        rows = sorted((r[i][2] for r in rounds), key=lambda row: row.msgs_per_s)
        out.append((dimension, n, rows[(len(rows) - 1) // 2]))
    return out


def rounds_table(rounds: list[list[tuple[str, int, Row]]]) -> str:
    """Every round's msgs/s per case, and its ratio to the same round's first case."""
    lines = ["| dimension | n | " + " | ".join(f"round {k + 1}" for k in range(len(rounds))) + " |"]
    lines.append("|---|---:|" + "---:|" * len(rounds))
    for i, (dimension, n, _) in enumerate(rounds[0]):
        cells = [f"{r[i][2].msgs_per_s:,.0f} ({r[i][2].msgs_per_s / r[0][2].msgs_per_s:.2f}×)" for r in rounds]
        lines.append(f"| {dimension} | {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def window_rounds_table(rounds: list[list[tuple[str, int, Row]]]) -> str:
    """Every round's steady-window msgs/s per case, its ratio to the same round's first case, and its alone share."""
    lines = ["| dimension | n | " + " | ".join(f"round {k + 1}" for k in range(len(rounds))) + " |"]
    lines.append("|---|---:|" + "---:|" * len(rounds))
    for i, (dimension, n, _) in enumerate(rounds[0]):
        cells = []
        for r in rounds:
            window, first = WINDOWS.get(id(r[i][2])), WINDOWS.get(id(r[0][2]))
            if window is None or first is None:
                cells.append("–")
                continue
            alone = f", alone {window.alone:.0%}" if window.alone else ""
            cells.append(f"{window.msgs_per_s:,.0f} ({window.msgs_per_s / first.msgs_per_s:.2f}×{alone})")
        lines.append(f"| {dimension} | {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def flatness_table(rounds: list[list[tuple[str, int, Row]]]) -> str:
    """Per case, each round's ratio to the same round's first case of its own dimension (1 queue; 1
    connection, run as the other connection cases are), whole case and steady window: the median over
    rounds and the range, the figure for "flat within ±10 %" with its spread."""
    lines = [
        "| dimension | n | whole: median ratio [min–max] | window: median ratio [min–max] |",
        "|---|---:|---:|---:|",
    ]
    first = {dimension: i for i, (dimension, _, _) in reversed(list(enumerate(rounds[0])))}
    for i, (dimension, n, _) in enumerate(rounds[0]):
        base = first[dimension]
        whole = [r[i][2].msgs_per_s / r[base][2].msgs_per_s for r in rounds]
        windows = [
            w.msgs_per_s / b.msgs_per_s
            for r in rounds
            if (w := WINDOWS.get(id(r[i][2]))) is not None and (b := WINDOWS.get(id(r[base][2]))) is not None
        ]
        lines.append(f"| {dimension} | {n:,} | {_spread(whole)} | {_spread(windows)} |")
    return "\n".join(lines)


def _spread(ratios: list[float]) -> str:
    if not ratios:
        return "–"
    ordered = sorted(ratios)
    return f"{ordered[(len(ordered) - 1) // 2]:.2f}× [{ordered[0]:.2f}–{ordered[-1]:.2f}]"


def window_table(rounds: list[list[tuple[str, int, Row]]]) -> str:
    """Per case, the round whose steady-window msgs/s is the median: msgs/s, ratio, CPU per message."""
    lines = [
        "| dimension | n | window msgs/s | ratio to the first case's | window s | broker CPU µs/msg | "
        "client CPU µs/msg | alone |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    chosen: list[Window | None] = []
    for i in range(len(rounds[0])):
        windows = sorted((w for r in rounds if (w := WINDOWS.get(id(r[i][2]))) is not None), key=lambda w: w.msgs_per_s)
        chosen.append(windows[(len(windows) - 1) // 2] if windows else None)
    base = chosen[0]
    for (dimension, n, _), window in zip(rounds[0], chosen, strict=True):
        if window is None or base is None:
            lines.append(f"| {dimension} | {n:,} | – | – | – | – | – | – |")
            continue
        lines.append(
            f"| {dimension} | {n:,} | {window.msgs_per_s:,.0f} | {window.msgs_per_s / base.msgs_per_s:.2f}× | "
            f"{window.seconds:.2f} | {window.broker_cpu / window.messages * 1e6:.1f} | "
            f"{window.client_cpu / window.messages * 1e6:.1f} | {window.alone:.0%} |"
        )
    return "\n".join(lines)


def scale_table(results: list[tuple[str, int, Row]]) -> str:
    base = next(row.msgs_per_s for _, _, row in results)  # 1 queue, 1 connection
    base_cpu = next((sum(row.broker_cpu) + sum(row.client_cpu)) / row.messages for _, _, row in results)
    lines = [
        (
            "| dimension | n | msgs/s | ratio to 1 queue, 1 connection | broker CPU µs/msg | client CPU µs/msg |"
            " CPU ratio | broker user / sys | client user / sys | client collections g0 / g1 / g2 |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for dimension, n, row in results:
        broker, client = (sum(cpu) / row.messages * 1e6 for cpu in (row.broker_cpu, row.client_cpu))
        lines.append(
            f"| {dimension} | {n:,} | {row.msgs_per_s:,.0f} | {row.msgs_per_s / base:.2f}× | {broker:.1f} | "
            f"{client:.1f} | {(broker + client) / 1e6 / base_cpu:.2f}× | {_split(row.broker_cpu, row.messages)} | "
            f"{_split(row.client_cpu, row.messages)} | {' / '.join(map(str, COLLECTIONS.get(id(row), ())))} |"
        )
    return "\n".join(lines)


def _split(cpu: tuple[float, float], messages: int) -> str:
    """User and system CPU µs per message."""
    return f"{cpu[0] / messages * 1e6:.1f} / {cpu[1] / messages * 1e6:.1f}"


def detail_table(results: list[tuple[str, int, Row]]) -> str:
    """Per message: page faults, syscalls, main thread's µs on CPU / waiting for a CPU / off CPU, blocked I/O."""
    lines = [
        "| dimension | n | who | minor faults | major faults | read+write syscalls | main thread µs on CPU / "
        "waiting for CPU / neither | voluntary switches | block-I/O delay µs |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for dimension, n, row in results:
        for who, k in row.kernel.items():
            per = row.messages
            wall = row.seconds * 1e6 / per
            on, wait = k["on_cpu_ns"] / per / 1e3, k["wait_ns"] / per / 1e3
            lines.append(
                f"| {dimension} | {n:,} | {who} | {k['minflt'] / per:.3f} | {k['majflt'] / per:.3f} | "
                f"{(k['syscr'] + k['syscw']) / per:.3f} | {on:.2f} / {wait:.2f} / {wall - on - wait:.2f} | "
                f"{k['vcsw'] / per:.3f} | {k['blkio_ticks'] * 1e6 / CLOCK_TICKS / per:.2f} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=20_000, help="single sends per case (default 20,000)")
    parser.add_argument("--quick", action="store_true", help="2,000 sends per case")
    parser.add_argument("--inflight", type=int, default=128, help="single sends in flight (default 128)")
    parser.add_argument(
        "--inflight-per-connection",
        type=int,
        metavar="K",
        help="connections cases: K sends in flight on every connection (K x N in all) instead of --inflight spread",
    )
    parser.add_argument(
        "--fresh-messages", action="store_true", help="each send builds its Message (default: all built before timing)"
    )
    parser.add_argument(
        "--client-processes",
        type=int,
        metavar="P",
        help="connections cases: the N producers spread over P client processes (aggregate msgs/s, CPU summed)",
    )
    parser.add_argument("--profile", type=Path, help="py-spy the broker and this process per case into DIR")
    parser.add_argument(
        "--queues", type=int, nargs="*", default=QUEUE_COUNTS, help="queue counts (default 1 10 100 1000)"
    )
    parser.add_argument(
        "--connections", type=int, nargs="*", default=CONNECTION_COUNTS, help="connection counts (default 1 10 100)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of all cases, interleaved; the table takes medians (default 1)"
    )
    parser.add_argument(
        "--detail", action="store_true", help="also faults, syscalls and the schedstat split per message"
    )
    add_loop_argument(parser, "the event loop the producers run on in this process (default asyncio)")
    args = parser.parse_args(argv)
    info = machine()
    with temp_root("sparkmq-client-scale-bench-") as root, recording(root, profile_dir=args.profile) as bench:
        sends = 2_000 if args.quick else args.sends
        rounds = [
            run_loop(
                scale_cases(
                    bench,
                    sends,
                    args.inflight,
                    args.queues,
                    args.connections,
                    args.inflight_per_connection,
                    args.fresh_messages,
                    args.client_processes,
                    args.loop,
                ),
                args.loop,
            )
            for _ in range(args.repeat)
        ]
    print_machine(info)
    results = medians(rounds)
    title = "single sends as queues and connections grow (100 B"
    title += ", each message built at send time)" if args.fresh_messages else ", messages built before timing)"
    if args.repeat > 1:
        title += f"; each row the median-msgs/s run of {args.repeat} rounds (cases interleaved)"
        print("\n## every round's msgs/s\n\n" + rounds_table(rounds))
        print("\n## every round's steady window: msgs/s (ratio to the round's first case, alone share)\n")
        print(window_rounds_table(rounds))
    print(f"\n## {title}\n\n" + scale_table(results))
    print("\n## the steady window (each row the median-window-msgs/s round)\n\n" + window_table(rounds))
    print(
        "\n## flatness: each round's ratio to the same round's 1-queue / 1-connection case, median [range]\n\n"
        + flatness_table(rounds)
    )
    if args.detail:
        print("\n## per message, each process (main thread for the schedstat split)\n\n" + detail_table(results))
    for profile in bench.profiles:
        print("\n" + profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
