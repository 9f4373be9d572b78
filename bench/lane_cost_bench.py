"""The broker's fixed Python cost per read: one read holding ONE plain send, served in-process.

Run from the repo root::

    .venv/bin/python bench/lane_cost_bench.py                 # ~10 s
    .venv/bin/python bench/lane_cost_bench.py --reads 50000 --queues 1 1000
    .venv/bin/python bench/lane_cost_bench.py --connections 50 --queues 4   # 50 connections' reads a turn
    .venv/bin/python bench/lane_cost_bench.py --ping --queues 4   # GET_MAX_OFFSET: the generic request path

A real ``BrokerController`` (ASYNC flush, no NameServer, a temporary store on the repository's
disk) and one server-side ``RemotingConnection`` whose transport only collects what is written
(no socket: the syscalls of a real read and write are left out, ``broker_request_bench.py
--inflight 1`` measures them with everything else). Each read holds ``--per-read`` (1)
SEND_MESSAGE_V2 frames (100 B body, ``WAIT`` and ``UNIQ_KEY``, what sparkmq's producer sends),
round-robin over a topic's ``--queues``, handed to ``data_received`` as the event loop would, one
read of each of ``--connections`` (1) connections per event-loop turn (``asyncio.sleep(0)`` ends
the turn: with the turn lane the reads are served then); the figure is this process's CPU
(``time.process_time``) per read, the best of five runs, with the store's flush threads running
as in a broker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import REPO, bench_root, machine

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.controller import BrokerController
from sparkmq.message.properties import encode_properties
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.namesrv_bodies import TopicConfig

BODY = os.urandom(100)
REPEATS = 5  # the best of these runs of each case is reported


class CollectingTransport:
    """What ``RemotingConnection`` asks of a transport; writes are counted, not sent."""

    def __init__(self) -> None:
        self.written = 0

    def writelines(self, frames: list[bytes]) -> None:
        self.written += len(frames)

    def write(self, data: bytes) -> None:
        self.written += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def frames(topic: str, queues: int, count: int, run: int = 1) -> list[bytes]:
    """``count`` SEND_MESSAGE_V2 frames, round-robin over ``queues`` in runs of ``run`` sends per queue."""
    prefix = os.urandom(8).hex().upper()
    out = []
    for i in range(count):
        props = encode_properties({"WAIT": "true", "UNIQ_KEY": f"{prefix}{i:016X}"}).decode()
        fields = {"a": "PID_BENCH", "b": topic, "c": "TBW102", "d": str(queues), "e": str(i // run % queues), "f": "0"}
        fields.update({"g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false", "m": "false"})
        out.append(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, i + 1, ext_fields=fields, body=BODY).encode())
    return out


def pings(topic: str, count: int) -> list[bytes]:
    """``count`` GET_MAX_OFFSET frames (the generic request path: decoded, a processor coroutine)."""
    fields = {"topic": topic, "queueId": "0"}
    return [
        RemotingCommand.request(RequestCode.GET_MAX_OFFSET, i + 1, ext_fields=fields).encode() for i in range(count)
    ]


async def case(
    broker: BrokerController, queues: int, reads: int, per_read: int, connections: int, run: int = 1, ping: bool = False
) -> float:
    """CPU µs per read of ``per_read`` sends, over ``reads`` reads after a warm-up round over every
    queue; each event-loop turn holds one read of each of ``connections`` connections."""
    topic = f"LaneCost{queues}"
    broker.context.topics.put(TopicConfig(topic, queues, queues, 6))
    transport = CollectingTransport()
    clients = [broker.server._new_connection() for _ in range(connections)]  # noqa: SLF001 - the server's own factory
    for connection in clients:
        connection.connection_made(transport)  # type: ignore[attr-defined]
    try:
        for frame in frames(topic, queues, queues):  # each queue's first put creates its ConsumeQueue
            clients[0].data_received(frame)  # type: ignore[attr-defined]
            await asyncio.sleep(0)  # the turn ends: sends read in it are served
        sends = frames(topic, queues, reads * per_read, run) if not ping else pings(topic, reads * per_read)
        todo = [b"".join(sends[i : i + per_read]) for i in range(0, len(sends), per_read)]
        turns = [todo[i : i + connections] for i in range(0, len(todo), connections)]
        best = float("inf")
        for _ in range(REPEATS):
            written = transport.written
            started = time.process_time()
            for turn in turns:
                for connection, frame in zip(clients, turn, strict=False):
                    connection.data_received(frame)  # type: ignore[attr-defined]
                await asyncio.sleep(0)
            for _ in range(3):  # a request served by a Task answers a turn or two later
                await asyncio.sleep(0)
            best = min(best, time.process_time() - started)
            if transport.written - written < reads:
                raise RuntimeError(f"{transport.written - written} writes for {reads} reads: not all answered")
        return best / reads * 1e6
    finally:
        for connection in clients:
            connection.connection_lost(None)  # type: ignore[attr-defined]


async def run(store: Path, args: argparse.Namespace) -> list[str]:
    config = BrokerConfig(listen_port=0, store_path_root_dir=store, namesrv_addr="")
    async with BrokerController(config) as broker:
        rows = []
        for queues in args.queues:
            per_read = await case(broker, queues, args.reads, args.per_read, args.connections, args.run, args.ping)
            sends = f"{args.per_read} | {args.reads:,} | {per_read:.1f} | {per_read / args.per_read:.1f}"
            rows.append(f"| {queues:,} | {sends} |")
        return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=20_000, help="reads per case (default 20,000)")
    parser.add_argument("--per-read", type=int, default=1, help="sends per read (default 1)")
    parser.add_argument("--queues", type=int, nargs="+", default=[1, 1000], help="queues per case (default 1 1000)")
    parser.add_argument(
        "--connections", type=int, default=1, help="connections whose reads share one event-loop turn (default 1)"
    )
    parser.add_argument(
        "--run", type=int, default=1, help="consecutive sends to one queue before the next (default 1: round-robin)"
    )
    parser.add_argument(
        "--ping", action="store_true", help="reads hold GET_MAX_OFFSET requests instead of sends (the generic path)"
    )
    args = parser.parse_args(argv)
    info = machine()
    root = Path(tempfile.mkdtemp(prefix="sparkmq-lane-cost-", dir=bench_root()))
    try:
        rows = asyncio.run(run(root / "store", args))
    finally:
        shutil.rmtree(root)
    print(f"{info['date']} | {info.get('commit', '')} | load average {os.getloadavg()[0]:.2f}")
    print("| queues | sends per read | reads | broker CPU µs/read | µs/send |\n|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
