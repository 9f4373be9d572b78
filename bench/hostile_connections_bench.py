"""Idle and slow-loris connections beside a healthy client: does the healthy client's latency move?

    .venv/bin/python bench/hostile_connections_bench.py                      # 5,000 idle + 1,000 slow-loris
    .venv/bin/python bench/hostile_connections_bench.py --idle 500 --slow 100 --sends 500   # smoke run

A real ``sparkmq namesrv`` and ``sparkmq broker`` are started (``serverMaxConnections`` raised so the
hostile connections are admitted, default idle timeout and frame deadline). The healthy client,
``AsyncProducer.send`` one message at a time, measures its send latency alone, then while a
second process holds ``--idle`` connections that never send a byte and ``--slow`` connections that
each began a 1 MiB frame and drip one more byte every second (slow-loris), then alone again
(the shared machine's noise shows as the spread of the two "alone" phases). At the end every message
the healthy client was acknowledged is read back. Prints one JSON line per phase and a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from bench_common import bench_root, machine
from sparkmq.client import AsyncProducer, AsyncPullConsumer, Message, MessageQueue
from sparkmq.client.message import decode_pull_body
from support.client_harness import create_topic, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

TOPIC = "HealthyLatency"
SLOW_FRAME_BYTES = 1 << 20  # what each slow-loris connection announces and never finishes


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def hold(address: str, idle: int, slow: int, seconds: float) -> None:
    """The hostile peer: open the connections, drip the slow ones, report how many the server closed."""
    host, port = address.rsplit(":", 1)
    idle_conns = [await asyncio.open_connection(host, int(port)) for _ in range(idle)]
    slow_conns = [await asyncio.open_connection(host, int(port)) for _ in range(slow)]
    for _reader, writer in slow_conns:
        writer.write(struct.pack(">II", SLOW_FRAME_BYTES, 64) + b"{")
    print("holding", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        for _reader, writer in slow_conns:
            if not writer.is_closing():
                writer.write(b" ")
    closed = sum(reader.at_eof() for reader, _ in idle_conns + slow_conns)
    print(json.dumps({"hostile_connections": idle + slow, "closed_by_server": closed}), flush=True)
    for _reader, writer in idle_conns + slow_conns:
        writer.close()


async def latencies(producer: AsyncProducer, sends: int, phase: str, sent: list[bytes]) -> dict[str, object]:
    took = []
    for i in range(sends):
        body = f"{phase}-{i}".encode()
        started = time.perf_counter()
        await producer.send(Message(TOPIC, body))
        took.append((time.perf_counter() - started) * 1e6)
        sent.append(body)
    took.sort()
    return {
        "phase": phase,
        "sends": sends,
        "p50_us": round(statistics.median(took)),
        "p99_us": round(took[int(len(took) * 0.99) - 1]),
        "max_us": round(took[-1]),
    }


async def read_back(namesrv: str) -> set[bytes]:
    stored: set[bytes] = set()
    async with AsyncPullConsumer("hostile-bench-reader", namesrv, auto_commit_interval_s=None) as consumer:
        queue = MessageQueue(TOPIC, "broker-a", 0)
        offset, end = 0, await consumer.max_offset(queue)
        while offset < end:
            result = await consumer.pull_raw(queue, offset, 1024)
            stored.update(m.body for m in decode_pull_body(result.body, "broker-a"))
            offset = result.next_begin_offset
    return stored


async def measure(namesrv: str, broker: str, args: argparse.Namespace) -> None:
    sent: list[bytes] = []
    async with AsyncProducer("PID_hostile_bench", namesrv) as producer:
        await latencies(producer, 200, "warm-up", sent)
        print(json.dumps(await latencies(producer, args.sends, "alone", sent)), flush=True)
        peer = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--hold",
                broker,
                "--idle",
                str(args.idle),
                "--slow",
                str(args.slow),
                "--hold-seconds",
                str(args.hold_seconds),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert peer.stdout is not None
        assert peer.stdout.readline().strip() == "holding", "the hostile peer did not start"
        print(
            json.dumps(
                await latencies(producer, args.sends, f"beside {args.idle} idle + {args.slow} slow-loris", sent)
            ),
            flush=True,
        )
        print(peer.stdout.read().strip(), flush=True)
        peer.wait()
        peer.stdout.close()
        print(json.dumps(await latencies(producer, args.sends, "alone again", sent)), flush=True)
    lost = len(set(sent) - await read_back(namesrv))
    print(json.dumps({"summary": {"acknowledged": len(sent), "lost": lost}}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=5000)
    parser.add_argument("--slow", type=int, default=1000)
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument(
        "--hold-seconds", type=float, default=15.0, help="how long the hostile peer holds (< frame deadline)"
    )
    parser.add_argument("--hold", metavar="BROKER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    raise_fd_limit()
    if args.hold:
        asyncio.run(hold(args.hold, args.idle, args.slow, args.hold_seconds))
        return 0
    print(json.dumps({"machine": machine(), "idle": args.idle, "slow": args.slow}), flush=True)
    with (
        tempfile.TemporaryDirectory(dir=bench_root()) as tmp,
        NamesrvProcess.start() as ns,
        BrokerProcess.start(Path(tmp) / "store", ns.address, "--set", "serverMaxConnections=10000") as broker,
    ):
        create_topic([broker.address], TOPIC, 1)
        wait_for_route(ns.address, TOPIC, {"broker-a"})
        asyncio.run(measure(ns.address, broker.address, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
