"""HA benchmark: SYNC_MASTER beside ASYNC_MASTER, each with a slave, over loopback.

Run from the repo root::

    .venv/bin/python bench/ha_bench.py            # about 30 s
    .venv/bin/python bench/ha_bench.py --quick    # a few seconds

For each role a master and a slave run as real ``sparkmq broker`` subprocesses (no NameServer:
the slave gets ``haMasterAddress``; ASYNC flush; 64 MiB CommitLog segments; temporary stores on
the repository's disk). One asyncio client process (``RemotingClient``, raw frames, WAIT=true
as Java producers send) measures:

* ``batch-32``: SEND_BATCH_MESSAGE of 32 messages, 8 requests in flight;
* ``send-v2 x1``: SEND_MESSAGE_V2, 16 in flight;
* ``latency``: SEND_MESSAGE_V2 one at a time; p50 / p99 round trip.

After each case the client waits until the slave's CommitLog ends where the master's does
(``catch-up s``: 0 for SYNC_MASTER, which acknowledged only what the slave had). ``CPU µs/msg``
is the master's + the slave's user+system time (/proc) per message: on a shared machine that
is the steadier figure. Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from broker_bench import batch_plan, single_plan

from bench_common import REPO, Service, bench_root, free_port, loadavg, machine

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient

TIMEOUT_S = 30.0
QUEUES = 4
SEGMENT = str(64 * 1024 * 1024)


class Broker(Service):
    """``sparkmq broker`` with ``--set`` pairs; ``address`` from its ready line."""

    def __init__(self, store_dir: Path, *settings: str) -> None:
        args = ["broker", "--host", "127.0.0.1", "--port", "0", "--store-dir", str(store_dir)]
        for setting in (f"mapedFileSizeCommitLog={SEGMENT}", "maxHashSlotNum=500000", "maxIndexNum=2000000", *settings):
            args += ["--set", setting]
        super().__init__(args, "broker listening on ")


@dataclass
class Row:
    role: str
    case: str
    messages: int
    seconds: float
    cpu_s: float
    catch_up_s: float
    note: str = ""


class Pair:
    """A master of ``role`` and its slave, plus a client."""

    def __init__(self, root: Path, role: str) -> None:
        ha_port = free_port()
        self.role = role
        self.master = Broker(root / "master", f"brokerRole={role}", f"haListenPort={ha_port}")
        self.slave = Broker(
            root / "slave",
            "brokerRole=SLAVE",
            "brokerId=1",
            f"haMasterAddress=127.0.0.1:{ha_port}",
            "haSendHeartbeatInterval=1000",
            f"haListenPort={free_port()}",
        )
        self.client = RemotingClient()

    def cpu(self) -> float:
        return self.master.cpu_seconds() + self.slave.cpu_seconds()

    async def send(self, code: int, fields: dict[str, str], body: bytes) -> None:
        response = await self.client.invoke(self.master.address, code, fields, body, TIMEOUT_S)
        if response.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"{self.role} send answered {response.code} {response.remark}")

    async def max_offsets(self, address: str, topic: str) -> list[int]:
        answers = [
            await self.client.invoke(address, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)})
            for q in range(QUEUES)
        ]
        return [int(a.ext_fields.get("offset", "-1")) for a in answers]

    async def wait_linked(self) -> None:
        """Sends until the master acknowledges normally (a SYNC_MASTER needs the slave's link first)."""
        plan = single_plan("HaBenchProbe", 200)
        for fields, body in plan:
            response = await self.client.invoke(self.master.address, RequestCode.SEND_MESSAGE_V2, fields, body)
            if response.code == ResponseCode.SUCCESS:
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.role}: the slave never linked")

    async def wait_caught_up(self, topic: str) -> float:
        started = time.perf_counter()
        want = await self.max_offsets(self.master.address, topic)
        while await self.max_offsets(self.slave.address, topic) != want:
            await asyncio.sleep(0.01)
        return time.perf_counter() - started

    async def case(
        self, case: str, topic: str, code: int, plan: list[tuple[dict[str, str], bytes]], messages: int, inflight: int
    ) -> tuple[Row, list[float]]:
        await self.send(code, *plan[0])  # the topic exists before timing
        await self.wait_caught_up(topic)  # the slave has the topic's queues too (dispatched from the log)
        samples: list[float] = []
        items = iter(plan[1:])

        async def worker() -> None:
            for fields, body in items:
                started = time.perf_counter()
                await self.send(code, fields, body)
                samples.append(time.perf_counter() - started)

        cpu = self.cpu()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        seconds = time.perf_counter() - started
        catch_up = await self.wait_caught_up(topic)
        return Row(self.role, case, messages, seconds, self.cpu() - cpu, catch_up, f"{inflight} in flight"), samples

    async def close(self) -> None:
        await self.client.close()
        self.master.stop()
        self.slave.stop()


async def run_role(root: Path, role: str, scale: int) -> tuple[list[Row], list[float]]:
    pair = Pair(root, role)
    try:
        await pair.wait_linked()
        size = 32
        rows = []
        batch_count = 1000 * scale * size
        row, _ = await pair.case(
            "batch-32",
            "HaBenchBatch",
            RequestCode.SEND_BATCH_MESSAGE,
            batch_plan("HaBenchBatch", batch_count + size, size),
            batch_count,
            8,
        )
        rows.append(row)
        single = 2000 * scale
        row, _ = await pair.case(
            "send-v2 x1",
            "HaBenchSingle",
            RequestCode.SEND_MESSAGE_V2,
            single_plan("HaBenchSingle", single + 1),
            single,
            16,
        )
        rows.append(row)
        latency = 1000 * scale
        row, samples = await pair.case(
            "latency",
            "HaBenchLatency",
            RequestCode.SEND_MESSAGE_V2,
            single_plan("HaBenchLatency", latency + 1),
            latency,
            1,
        )
        rows.append(row)
        return rows, samples
    finally:
        await pair.close()


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1] * 1000 if len(samples) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run (a tenth of the messages)")
    args = parser.parse_args(argv)
    scale = 1 if args.quick else 5
    for key, value in machine().items():
        print(f"{key}: {value}")
    rows: list[Row] = []
    latencies: dict[str, list[float]] = {}
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        root = Path(tempfile.mkdtemp(prefix="sparkmq-ha-bench-", dir=bench_root()))
        try:
            role_rows, samples = asyncio.run(run_role(root, role, scale))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        rows += role_rows
        latencies[role] = samples
    print("\n| role | case | messages | seconds | msgs/s | CPU µs/msg (master+slave) | catch-up s | note |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r.role} | {r.case} | {r.messages:,} | {r.seconds:.2f} | {r.messages / r.seconds:,.0f} | "
            f"{r.cpu_s / r.messages * 1e6:.0f} | {r.catch_up_s:.2f} | {r.note} |"
        )
    print()
    for role, samples in latencies.items():
        print(
            f"{role} single-send latency: p50 {percentile(samples, 50):.2f} ms, p99 {percentile(samples, 99):.2f} ms, "
            f"max {max(samples) * 1000:.1f} ms"
        )
    print(f"loadavg at end: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
