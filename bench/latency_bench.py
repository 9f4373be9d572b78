"""Latency benchmark: one message in flight, where a lone request's time goes, and what makes its p99.

Run from the repo root::

    .venv/bin/python bench/latency_bench.py --loop uvloop                      # ~1 min
    .venv/bin/python bench/latency_bench.py --loop uvloop --broker-turns off   # A/B: no turn groups
    .venv/bin/python bench/latency_bench.py --loop uvloop --broker-gc default --client-gc default

A real ``sparkmq dev`` (NameServer + broker in one process, ASYNC flush) is started through a
small prelude that records every garbage collection of the broker process (start, end,
generation) and applies the A/B switches below; this process then runs, ``--rounds`` times each,
interleaved: ``AsyncProducer.send`` one after another (100 B), ``GET_MAX_OFFSET`` one after
another (the generic request path, without the store), sends to a queue a consumer long-polls
(``--long-polls``: send → parked pull woken → ``poll`` returns it), paced sends (``--paced-ms``:
one ``AsyncProducer.send`` every N ms, as a service producing at a modest rate: what the spin after
each read costs when the next read is farther away than its window), a bare asyncio echo (the
loopback floor; its server's CPU is the echo process's), and the blocking ``Producer.send`` from
this thread (the hand-off to the client's loop thread and back).

Per case: p50 / p90 / p99 / p99.9 / max in µs over all rounds, CPU per request of both processes
in µs from ``/proc/<pid>/schedstat`` (nanoseconds, every thread: not the 10 ms ticks of
``/proc/<pid>/stat``), how many requests overlapped a garbage collection of the broker or of this
process, and how many of the slowest 1 % did.

A/B switches (the bench's own, applied before the services start; nothing in the package reads them):

* ``--broker-turns on|off``: ``off`` makes the broker's ``TurnGroups.defer`` always decline;
* ``--broker-gc landed|default``: ``default`` undoes the service's garbage-collector settings
  (``sparkmq.cli.service.settle_gc``) when the package has them;
* ``--client-gc default|freeze``: ``freeze`` collects and freezes this process's heap after the warm-up;
* ``--loop asyncio|uvloop``: this process's loop for the async cases; ``--broker-loop`` the broker's
  (``SPARKMQ_EVENT_LOOP``); ``--client-thread-loop`` the blocking facade's loop thread.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bench_common import REPO, Service, loadavg, machine, print_machine, run_loop, temp_root

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from client_send_bench import ECHO_SERVER

from sparkmq.client import AsyncProducer, AsyncPullConsumer, Message, Producer, loop_thread

PRELUDE = """
import atexit, gc, json, os, sys, time
events, started = [], [0]
def on_gc(phase, info):
    if phase == "start":
        started[0] = time.monotonic_ns()
    else:
        events.append((started[0], time.monotonic_ns(), info["generation"]))
gc.callbacks.append(on_gc)
if os.environ["LATENCY_TURNS"] == "off":
    from sparkmq.remoting import turns
    turns.TurnGroups.defer = lambda self, connection: False
if os.environ["LATENCY_GC"] == "default":
    from sparkmq.cli import service
    if hasattr(service, "settle_gc"):
        service.settle_gc = lambda: None
atexit.register(lambda: open(os.environ["LATENCY_GC_LOG"], "w").write(json.dumps(events)))
sys.argv[0] = "sparkmq"
from sparkmq.cli.main import main
sys.exit(main())
"""

LONG_POLL = "send → long-polling consumer's poll returns it"
GcEvents = list[tuple[int, int, int]]  # (start ns, end ns, generation), CLOCK_MONOTONIC
Samples = list[tuple[int, int]]  # (start ns, end ns) of each request, CLOCK_MONOTONIC


class Case:
    """One measured request path: its samples over every round, and the CPU both processes spent."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.samples: Samples = []
        self.broker_cpu_ns = self.client_cpu_ns = 0
        self.threads = ""  # the last round's per-thread CPU, both processes

    def us(self) -> list[float]:
        return sorted((end - start) / 1000 for start, end in self.samples)


def thread_stats(pid: int) -> dict[str, tuple[int, int]]:
    """Per thread name of ``pid``: CPU nanoseconds and times scheduled in so far (``schedstat``)."""
    stats: dict[str, tuple[int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = f"{(task / 'comm').read_text().strip()}[{task.name}]"
            ns, _wait, slices = (int(x) for x in (task / "schedstat").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
        old = stats.get(name, (0, 0))
        stats[name] = old[0] + ns, old[1] + slices
    return stats


def schedstat_ns(pid: int) -> int:
    """CPU nanoseconds every thread of ``pid`` has run so far (nanoseconds, not the 10 ms ticks of ``stat``)."""
    return sum(ns for ns, _slices in thread_stats(pid).values())


def thread_delta(after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]], n: int) -> str:
    """Per thread: CPU µs and times scheduled in, per request, for threads that ran."""
    parts = []
    for name, (ns, slices) in sorted(after.items(), key=lambda kv: -kv[1][0]):
        ns0, slices0 = before.get(name, (0, 0))
        if ns - ns0 > 0:
            parts.append(f"{name} {(ns - ns0) / n / 1000:.1f} µs, {(slices - slices0) / n:.2f} runs")
    return "; ".join(parts)


class DevWithGcLog(Service):
    """``sparkmq dev`` run through ``PRELUDE``: its GC events land in ``gc_log`` when it stops."""

    def __init__(self, root: Path, turns: str, gc_mode: str, broker_loop: str) -> None:
        self.gc_log = root / "broker-gc.json"
        env = {"LATENCY_TURNS": turns, "LATENCY_GC": gc_mode, "LATENCY_GC_LOG": str(self.gc_log)}
        if broker_loop != "auto":
            env["SPARKMQ_EVENT_LOOP"] = broker_loop
        args = ["dev", "--host", "127.0.0.1", "--namesrv-port", "0", "--port", "0", "--flush", "async"]
        args += ["--store-dir", str(root / "store")]
        super().__init__(args, "dev namesrv ", env=env, python_args=["-c", PRELUDE])
        _, _, self.namesrv, _, self.broker = self.ready_line.split()

    def gc_events(self) -> GcEvents:
        return [tuple(e) for e in json.loads(self.gc_log.read_text())] if self.gc_log.exists() else []


class Bench:
    """The cases against one dev process, this process's GC events, and the CPU accounting."""

    def __init__(self, dev: DevWithGcLog) -> None:
        self.dev = dev
        self.cases: dict[str, Case] = {}
        self.client_gc: GcEvents = []
        self._gc_started = 0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.monotonic_ns()
        else:
            self.client_gc.append((self._gc_started, time.monotonic_ns(), info["generation"]))

    def case(self, name: str) -> Case:
        return self.cases.setdefault(name, Case(name))

    def _begin(self, pid: int) -> tuple[tuple[dict[str, tuple[int, int]], ...], int, int]:
        return (thread_stats(pid), thread_stats(os.getpid())), schedstat_ns(pid), schedstat_ns(os.getpid())

    def _end(
        self,
        name: str,
        pid: int,
        begun: tuple[tuple[dict[str, tuple[int, int]], ...], int, int],
        starts: list[int],
        ends: list[int],
    ) -> None:
        (threads, broker, client), case, count = begun, self.case(name), len(starts)
        case.broker_cpu_ns += schedstat_ns(pid) - broker
        case.client_cpu_ns += schedstat_ns(os.getpid()) - client
        case.samples += zip(starts, ends, strict=True)
        case.threads = (
            f"broker: {thread_delta(thread_stats(pid), threads[0], count)}; "
            f"client: {thread_delta(thread_stats(os.getpid()), threads[1], count)}"
        )

    async def timed(
        self, name: str, one: Callable[[], Awaitable[object]], count: int, server_pid: int | None = None
    ) -> None:
        """``count`` awaits of ``one()``; ``server_pid``: the server's CPU is that process's (default the broker's)."""
        pid = server_pid or self.dev.process.pid
        # two lists of ints, not a list of tuples: ints are not tracked by the GC, tuples would be the bench's own
        starts, ends, begun = [0] * count, [0] * count, self._begin(pid)
        for i in range(count):
            starts[i] = time.monotonic_ns()
            await one()
            ends[i] = time.monotonic_ns()
        self._end(name, pid, begun, starts, ends)

    async def paced(self, name: str, one: Callable[[], Awaitable[object]], count: int, every_s: float) -> None:
        """``count`` awaits of ``one()``, one started every ``every_s`` (the idle time between them is in the CPU)."""
        pid, loop = self.dev.process.pid, asyncio.get_running_loop()
        starts, ends, begun = [0] * count, [0] * count, self._begin(pid)
        slot = loop.time()
        for i in range(count):
            slot += every_s
            await asyncio.sleep(max(slot - loop.time(), 0.0))
            starts[i] = time.monotonic_ns()
            await one()
            ends[i] = time.monotonic_ns()
        self._end(name, pid, begun, starts, ends)

    def timed_blocking(self, name: str, one: Callable[[], object], count: int) -> None:
        pid = self.dev.process.pid
        starts, ends, begun = [0] * count, [0] * count, self._begin(pid)
        for i in range(count):
            starts[i] = time.monotonic_ns()
            one()
            ends[i] = time.monotonic_ns()
        self._end(name, pid, begun, starts, ends)


def overlapping(samples: Samples, events: GcEvents) -> int:
    """How many of ``samples`` overlap any of ``events`` (both sorted by start)."""
    hits, j = 0, 0
    ev = sorted(events)
    for start, end in sorted(samples):
        while j < len(ev) and ev[j][1] < start:
            j += 1
        if j < len(ev) and ev[j][0] <= end:
            hits += 1
    return hits


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (the peers' common.pct)."""
    return values[max(0, min(len(values) - 1, round(p / 100.0 * len(values) + 0.5) - 1))]


def report(bench: Bench, broker_gc: GcEvents) -> str:
    lines = [
        "| case | requests | p50 µs | p90 | p99 | p99.9 | max | broker CPU µs/req | client CPU µs/req "
        "| overlapping a broker GC (gen 2) | client GC (gen 2) | of the slowest 1 %: broker GC / client GC |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    every = [s for case in bench.cases.values() for s in case.samples]
    first, last = min(s[0] for s in every), max(s[1] for s in every)
    broker_gc = [e for e in broker_gc if first <= e[0] <= last]  # during the measured rounds only
    client_gc = [e for e in bench.client_gc if first <= e[0] <= last]
    gen2 = [e for e in broker_gc if e[2] == 2], [e for e in client_gc if e[2] == 2]
    for case in bench.cases.values():
        us, n = case.us(), len(case.samples)
        slow_cut = pct(us, 99)
        slow = [s for s in case.samples if (s[1] - s[0]) / 1000 >= slow_cut]
        cpu = f"{case.broker_cpu_ns / n / 1000:.1f} | {case.client_cpu_ns / n / 1000:.1f}" if case.threads else "- | -"
        lines.append(
            f"| {case.name} | {n:,} | {pct(us, 50):.0f} | {pct(us, 90):.0f} | {pct(us, 99):.0f} | "
            f"{pct(us, 99.9):.0f} | {us[-1]:.0f} | {cpu} | {overlapping(case.samples, broker_gc)} "
            f"({overlapping(case.samples, gen2[0])}) | {overlapping(case.samples, client_gc)} "
            f"({overlapping(case.samples, gen2[1])}) | {len(slow)}: {overlapping(slow, broker_gc)} / "
            f"{overlapping(slow, client_gc)} |"
        )
    counts = [
        f"{who}: "
        + ", ".join(f"gen {g} {sum(1 for e in ev if e[2] == g)}" for g in range(3))
        + f", longest {max(((e[1] - e[0]) / 1000 for e in ev), default=0):.0f} µs"
        for who, ev in (("broker", broker_gc), ("client", client_gc))
    ]
    lines.append("\nper thread, last round (CPU µs and times scheduled in, per request):\n")
    lines += [f"* {case.name}: {case.threads}" for case in bench.cases.values() if case.threads]
    return (
        "\n".join(lines)
        + f"\n\ngarbage collections during the measured {(last - first) / 1e9:.1f} s: "
        + "; ".join(counts)
    )


async def async_round(
    bench: Bench,
    producer: AsyncProducer,
    consumer: AsyncPullConsumer,
    args: argparse.Namespace,
    echo: tuple[asyncio.StreamReader, asyncio.StreamWriter, int] | None,
) -> None:
    message = Message("LatencyBench", bytes(100))
    queue = (await consumer.queues_of("LatencyBench"))[0]
    await bench.timed("AsyncProducer.send, 1 in flight", lambda: producer.send(message), args.sends)
    await bench.timed("ping: GET_MAX_OFFSET, 1 in flight", lambda: consumer.max_offset(queue), args.sends)
    await send_to_long_poll(bench, producer, consumer, args.long_polls)
    for every_ms in args.paced_ms:
        await bench.paced(
            f"AsyncProducer.send every {every_ms:g} ms",
            lambda: producer.send(message),
            args.paced_sends,
            every_ms / 1000,
        )
    if echo is not None:
        reader, writer, echo_pid = echo
        payload = bytes(100)

        async def one() -> None:
            writer.write(payload)
            await reader.readexactly(100)

        await bench.timed("asyncio echo 100 B, 1 in flight (server: the echo process)", one, args.sends, echo_pid)


async def send_to_long_poll(bench: Bench, producer: AsyncProducer, consumer: AsyncPullConsumer, count: int) -> None:
    """From ``send`` to a long-polling consumer's ``poll`` returning the message: the send, the broker's
    wake-up of the parked pull (``broker/long_polling.py``) and the pull's answer. Each pull is given
    2 ms to park first (outside the clock); a missed wake-up would show as a sample near the poll's 5 s."""
    queue = (await consumer.queues_of("LatencyBench"))[0]
    await consumer.assign([queue])
    await consumer.seek_to_end(queue)
    message = Message("LatencyBench", bytes(100))

    pid = bench.dev.process.pid
    starts, ends, begun = [0] * count, [0] * count, bench._begin(pid)
    for i in range(count):
        polled = asyncio.ensure_future(consumer.poll(timeout_s=5.0))
        await asyncio.sleep(0.002)  # parked on the broker by now (its suspend-0 pull came back empty)
        starts[i] = time.monotonic_ns()
        await producer.send(message, queue=queue)
        received = await polled
        ends[i] = time.monotonic_ns()
        if len(received) != 1:
            raise RuntimeError(f"the long poll returned {len(received)} messages, not the one sent")
    # CPU per delivery: the send, the poll's two pulls (suspend 0, then the parked one) and the 2 ms timer
    bench._end(LONG_POLL, pid, begun, starts, ends)


async def run_async(bench: Bench, args: argparse.Namespace, echo_server: tuple[int, int] | None) -> None:
    """One round of the async cases on a fresh producer and consumer; ``echo_server``: (port, pid)."""
    producer = AsyncProducer("PID_LATENCY", bench.dev.namesrv, send_timeout_s=30.0)
    consumer = AsyncPullConsumer("CID_LATENCY", bench.dev.namesrv, auto_commit_interval_s=None)
    await producer.start()
    await consumer.start()
    echo = None
    if echo_server is not None:
        echo = (*await asyncio.open_connection("127.0.0.1", echo_server[0]), echo_server[1])
    try:
        message = Message("LatencyBench", bytes(100))
        for _ in range(200):  # creates the topic, warms routes and buffers
            await producer.send(message)
        if args.client_gc == "freeze":
            gc.collect()
            gc.freeze()
        await async_round(bench, producer, consumer, args, echo)
    finally:
        if echo is not None:
            echo[1].close()
        await consumer.close()
        await producer.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=5000, help="requests per case per round (default 5000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, cases interleaved (default 3)")
    parser.add_argument("--long-polls", type=int, default=1000, help="sends to a long-polling consumer per round")
    parser.add_argument(
        "--paced-ms", type=float, nargs="*", default=[2.0], help="paced sends: one every N ms (default 2; none: skip)"
    )
    parser.add_argument("--paced-sends", type=int, default=500, help="paced sends per pace per round (default 500)")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop", help="this process's loop")
    parser.add_argument("--broker-loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    parser.add_argument(
        "--client-thread-loop",
        choices=("auto", "asyncio"),
        default="auto",
        help="the blocking Producer's loop thread: auto (uvloop when installed) or asyncio",
    )
    parser.add_argument("--broker-turns", choices=("on", "off"), default="on")
    parser.add_argument("--broker-gc", choices=("landed", "default"), default="landed")
    parser.add_argument(
        "--client-gc", choices=("default", "freeze"), default="default", help="freeze: gc.freeze() after warm-up"
    )
    parser.add_argument("--no-echo", action="store_true", help="skip the asyncio echo floor")
    parser.add_argument("--json", type=Path, help="write every case's percentiles here")
    args = parser.parse_args(argv)
    if args.client_thread_loop == "asyncio":
        loop_thread.new_event_loop = asyncio.new_event_loop  # type: ignore[assignment]
    info = machine()
    with temp_root("sparkmq-latency-bench-") as root:
        dev = DevWithGcLog(root, args.broker_turns, args.broker_gc, args.broker_loop)
        echo, echo_server = None, None
        try:
            if not args.no_echo:
                echo = subprocess.Popen(
                    [sys.executable, "-c", ECHO_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
                assert echo.stdout is not None
                echo_server = int(echo.stdout.readline()), echo.pid
            bench = Bench(dev)
            blocking = Producer("PID_LATENCY_BLOCKING", dev.namesrv, send_timeout_s=30.0)
            blocking.start()
            message = Message("LatencyBench", bytes(100))
            try:
                for _ in range(200):
                    blocking.send(message)
                for _ in range(args.rounds):
                    run_loop(run_async(bench, args, echo_server), args.loop)
                    bench.timed_blocking(
                        "Producer.send (blocking), 1 in flight", lambda: blocking.send(message), args.sends
                    )
                    print(f"  round done, load {loadavg()}", file=sys.stderr, flush=True)
            finally:
                blocking.close()
        finally:
            if echo is not None:
                assert echo.stdin is not None
                echo.stdin.close()
                echo.wait(10)
            dev.stop()
        broker_gc = dev.gc_events()
    print_machine(info)
    print(f"options: {vars(args)}\n")
    print(report(bench, broker_gc))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    name: {
                        "p50": pct(c.us(), 50),
                        "p99": pct(c.us(), 99),
                        "p99.9": pct(c.us(), 99.9),
                        "n": len(c.samples),
                    }
                    for name, c in bench.cases.items()
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
