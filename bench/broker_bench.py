"""Broker benchmark: produce and consume over loopback with raw remoting frames, one client process.

Run from the repo root::

    .venv/bin/python bench/broker_bench.py            # full run (about a minute)
    .venv/bin/python bench/broker_bench.py --quick    # smoke run (seconds)
    .venv/bin/python bench/broker_bench.py --profile bench-profiles   # + py-spy of the broker

The broker is a real subprocess, ``python -m sparkmq broker --host 127.0.0.1 --port 0
--store-dir <tmp>`` (no NameServer, ASYNC flush, production segment sizes, a temporary
store on the repository's disk, removed afterwards). One asyncio client process
(:class:`RemotingClient`, one connection) then measures:

* ``send-v2 x1``: SEND_MESSAGE_V2 single messages, ``--inflight`` (64) requests in flight;
* ``batch-32`` / ``batch-256``: SEND_BATCH_MESSAGE with 32 / 256 messages per request,
  8 requests in flight;
* ``pull-4096``: PULL_MESSAGE of everything produced, maxMsgNums 4096 (the broker's
  ``maxTransferCountOnMessageInMemory``; it also caps a pull at 4 MiB), all queues pulled
  concurrently, records counted with ``record_starts``;
* ``pull-32``: the same with maxMsgNums 32, what the C++ and ali-ons clients ask for;
* ``latency``: one SEND_MESSAGE_V2 at a time; p50 / p99 round trip.

Bodies are 100 random bytes; properties are what a Java producer sends (``UNIQ_KEY``,
``TAGS``, ``KEYS``, ``WAIT``). Headers and bodies are built before any clock starts.
MiB/s counts message bodies only. ``broker CPU`` is the broker process's user+system time
during the case (from /proc), ``client CPU`` this process's: 1.0 s per second means that
process kept one core busy. Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench_profile import short_frame as _where

from bench_common import REPO, Service, bench_root, machine, print_machine  # noqa: E402 - bench/ is sys.path[0]

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from sparkmq.message.batch import encode_batch_items
from sparkmq.message.properties import encode_properties
from sparkmq.message.record import record_starts
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient

QUEUES = 4
BODY_BYTES = 100
MIB = 1024 * 1024
BATCH_INFLIGHT = 8
TIMEOUT_S = 30.0


@dataclass
class Result:
    """One row of the table."""

    case: str
    messages: int
    seconds: float
    broker_cpu: float
    client_cpu: float
    note: str = ""

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mib_per_s(self) -> float:
        return self.messages * BODY_BYTES / MIB / self.seconds


# -- the broker process --------------------------------------------------------------------
class BrokerProcess(Service):
    """``sparkmq broker`` as a subprocess; ``address`` comes from its ready line."""

    def __init__(self, store_dir: Path) -> None:
        super().__init__(
            ["broker", "--host", "127.0.0.1", "--port", "0", "--store-dir", str(store_dir)], "broker listening on "
        )


class Profiler:
    """``py-spy record`` attached to the broker for one case (collapsed stacks)."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        spy = Path(sys.executable).with_name("py-spy")
        self.process = subprocess.Popen(
            [str(spy), "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--output", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # attach before the clock starts

    def stop(self) -> str:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)
        return summarize(self.out)


def summarize(collapsed: Path, top: int = 15) -> str:
    """Where the broker's event-loop thread spends its busy samples (py-spy collapsed stacks).

    Only the main (event loop) thread is counted: the store's flush threads mostly wait, and
    py-spy still reports some of those waits as active. Self time is per line, inclusive
    time per sparkmq function.
    """
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = background = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        if not frames[0].startswith("_run_module_as_main"):
            background += n
            continue
        total += n
        own[_where(frames[-1], line_too=True)] += n
        for frame in {_where(f) for f in frames if "sparkmq/" in f and "sparkmq/cli" not in f and "__main__" not in f}:
            inclusive[frame] += n
    lines = [f"{total} event-loop samples ({background} more in other threads, not counted); self time:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines.append("inclusive time (sparkmq functions):")
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(top)]
    return "\n".join(lines)


# -- inputs, built before any clock starts -------------------------------------------------
def properties(count: int) -> list[str]:
    prefix = os.urandom(8).hex().upper()
    return [
        encode_properties(
            {"KEYS": f"order-{i}", "TAGS": "TagA", "WAIT": "true", "UNIQ_KEY": f"{prefix}{i:016X}"}
        ).decode()
        for i in range(count)
    ]


def bodies(count: int) -> list[bytes]:
    pool = [os.urandom(BODY_BYTES) for _ in range(min(count, 1024))]
    return [pool[i % len(pool)] for i in range(count)]


def send_fields(topic: str, queue_id: int, props: str, batch: bool = False) -> dict[str, str]:
    fields = {
        "a": "PID_BENCH",
        "b": topic,
        "c": "TBW102",
        "d": str(QUEUES),
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": props,
    }
    if batch:
        fields["m"] = "true"
    return fields


def single_plan(topic: str, count: int) -> list[tuple[dict[str, str], bytes]]:
    return [
        (send_fields(topic, i % QUEUES, p), b)
        for i, (p, b) in enumerate(zip(properties(count), bodies(count), strict=True))
    ]


def batch_plan(topic: str, count: int, size: int) -> list[tuple[dict[str, str], bytes]]:
    props, bods = [p.encode() for p in properties(count)], bodies(count)
    return [
        (
            send_fields(topic, (i // size) % QUEUES, "", batch=True),
            encode_batch_items(bods[i : i + size], props[i : i + size]),
        )
        for i in range(0, count, size)
    ]


# -- cases ---------------------------------------------------------------------------------
class Bench:
    def __init__(self, broker: BrokerProcess, client: RemotingClient) -> None:
        self.broker = broker
        self.client = client

    async def timed(self, case: str, messages: int, work: Callable[[], Awaitable[object]], note: str = "") -> Result:
        broker_cpu, client_cpu = self.broker.cpu_seconds(), time.process_time()
        started = time.perf_counter()
        await work()
        seconds = time.perf_counter() - started
        return Result(
            case, messages, seconds, self.broker.cpu_seconds() - broker_cpu, time.process_time() - client_cpu, note
        )

    async def expect_ok(self, code: int, fields: dict[str, str], body: bytes) -> None:
        response = await self.client.invoke(self.broker.address, code, fields, body, TIMEOUT_S)
        if response.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"request {code} failed: {response.code} {response.remark}")

    async def pipelined(self, code: int, plan: list[tuple[dict[str, str], bytes]], inflight: int) -> None:
        items = iter(plan)

        async def worker() -> None:
            for fields, body in items:  # one shared iterator: each request is sent once
                await self.expect_ok(code, fields, body)

        await asyncio.gather(*(worker() for _ in range(inflight)))

    async def produce(
        self, case: str, code: int, plan: list[tuple[dict[str, str], bytes]], messages: int, inflight: int
    ) -> Result:
        return await self.timed(case, messages, lambda: self.pipelined(code, plan, inflight), f"{inflight} in flight")

    async def pull_queue(self, topic: str, queue_id: int, max_nums: int) -> int:
        offset, count = 0, 0
        while True:
            fields = {
                "consumerGroup": "CID_BENCH",
                "topic": topic,
                "queueId": str(queue_id),
                "queueOffset": str(offset),
                "maxMsgNums": str(max_nums),
                "sysFlag": "4",
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subscription": "*",
                "subVersion": "0",
            }
            response = await self.client.invoke(
                self.broker.address, RequestCode.PULL_MESSAGE, fields, timeout=TIMEOUT_S
            )
            if response.code != ResponseCode.SUCCESS:
                return count
            count += len(record_starts(response.body))
            offset = int(response.ext_fields["nextBeginOffset"])

    async def consume(self, case: str, topics: list[str], expected: int, max_nums: int) -> Result:
        counts: list[int] = []

        async def work() -> None:
            counts.extend(
                await asyncio.gather(*(self.pull_queue(t, q, max_nums) for t in topics for q in range(QUEUES)))
            )

        result = await self.timed(case, expected, work, f"{len(topics) * QUEUES} queues pulled concurrently")
        if sum(counts) != expected:
            raise RuntimeError(f"{case}: read {sum(counts)} messages, expected {expected}")
        return result

    async def latency(self, count: int) -> tuple[Result, list[float]]:
        plan = single_plan("BenchLatency", count)
        samples: list[float] = []

        async def work() -> None:
            for fields, body in plan:
                started = time.perf_counter()
                await self.expect_ok(RequestCode.SEND_MESSAGE_V2, fields, body)
                samples.append(time.perf_counter() - started)

        await self.expect_ok(RequestCode.SEND_MESSAGE_V2, *plan[0])  # topic auto-created before timing
        result = await self.timed("send-v2 x1, 1 in flight (latency)", count, work)
        return result, samples


async def run_cases(
    broker: BrokerProcess, scale: int, inflight: int, profile_dir: Path | None
) -> tuple[list[Result], str, str]:
    client = RemotingClient()
    bench = Bench(broker, client)
    results: list[Result] = []
    profiles: list[str] = []
    singles, b32, b256, lat = 30_000 // scale, 320_000 // scale, 1_024_000 // scale, 5_000 // scale
    try:
        for topic in ("BenchSingle", "BenchBatch32", "BenchBatch256"):  # auto-create outside the clock
            for q in range(QUEUES):
                await bench.expect_ok(RequestCode.SEND_MESSAGE_V2, send_fields(topic, q, ""), b"warm-up")
        plans = [
            ("send-v2 x1", RequestCode.SEND_MESSAGE_V2, single_plan("BenchSingle", singles), singles, inflight),
            ("batch-32", RequestCode.SEND_BATCH_MESSAGE, batch_plan("BenchBatch32", b32, 32), b32, BATCH_INFLIGHT),
            ("batch-256", RequestCode.SEND_BATCH_MESSAGE, batch_plan("BenchBatch256", b256, 256), b256, BATCH_INFLIGHT),
        ]
        for case, code, plan, messages, depth in plans:
            spy = (
                Profiler(broker.process.pid, profile_dir / "batch-256.txt")
                if profile_dir and case == "batch-256"
                else None
            )
            results.append(await bench.produce(case, code, plan, messages, depth))
            if spy:
                profiles.append("## broker during batch-256 produce\n" + spy.stop())
            print(f"  {case:<40} {results[-1].msgs_per_s:>12,.0f} msgs/s", file=sys.stderr, flush=True)
        total = singles + b32 + b256 + 3 * QUEUES
        spy = Profiler(broker.process.pid, profile_dir / "pull-4096.txt") if profile_dir else None
        results.append(await bench.consume("pull-4096", ["BenchSingle", "BenchBatch32", "BenchBatch256"], total, 4096))
        if spy:
            profiles.append("## broker during pull-4096 consume\n" + spy.stop())
        results.append(await bench.consume("pull-32", ["BenchSingle"], singles + QUEUES, 32))
        for r in results[-2:]:
            print(f"  {r.case:<40} {r.msgs_per_s:>12,.0f} msgs/s", file=sys.stderr, flush=True)
        result, samples = await bench.latency(lat)
        results.append(result)
        cut = statistics.quantiles(samples, n=100)
        latency = (
            f"single-send latency over {len(samples)} sends: p50 {cut[49] * 1000:.3f} ms, "
            f"p99 {cut[98] * 1000:.3f} ms, max {max(samples) * 1000:.3f} ms"
        )
    finally:
        await client.close()
    return results, latency, "\n\n".join(profiles)


# -- driver --------------------------------------------------------------------------------


def table(results: list[Result]) -> str:
    lines = [
        "| case | messages | seconds | msgs/s | body MiB/s | broker CPU s | client CPU s | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.case} | {r.messages:,} | {r.seconds:.2f} | {r.msgs_per_s:,.0f} | {r.mib_per_s:.1f} | "
            f"{r.broker_cpu:.2f} | {r.client_cpu:.2f} | {r.note} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    parser.add_argument("--inflight", type=int, default=64, help="concurrent single sends (default 64)")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the broker during batch-256 and pull-4096")
    args = parser.parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    info = machine()
    print(
        f"sparkmq broker bench: {info['date']}, {info['cpu']}, {info['nproc']} CPUs, Python {info['python']}",
        file=sys.stderr,
    )
    root = Path(tempfile.mkdtemp(prefix="sparkmq-broker-bench-", dir=bench_root()))
    broker = BrokerProcess(root / "store")
    try:
        results, latency, profiles = asyncio.run(
            run_cases(broker, 10 if args.quick else 1, args.inflight, args.profile)
        )
    finally:
        broker.stop()
        shutil.rmtree(root)
    print_machine(info, "loadavg_at_end")
    print(table(results))
    print(latency)
    if profiles:
        print(profiles)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
