"""Broker CPU per request: pipelined single sends and 32-message pulls from a lean raw client.

Run from the repo root::

    .venv/bin/python bench/broker_request_bench.py                    # ~20 s
    .venv/bin/python bench/broker_request_bench.py --loop asyncio     # the broker without uvloop
    .venv/bin/python bench/broker_request_bench.py --flush sync       # SYNC flush (group put + group commit)
    .venv/bin/python bench/broker_request_bench.py --profile DIR      # + py-spy of the broker
    .venv/bin/python bench/broker_request_bench.py --sends 200000 --pulls 2000 --pull-batch 4096 --inflight 4
                                                                       # a Spark task's 4096-record pulls

The broker is a real ``python -m sparkmq broker`` subprocess (no NameServer, a temporary store
on the repository's disk). The client is one asyncio process writing pre-encoded frames over one
connection: every SEND_MESSAGE_V2 (100 B body, ``WAIT`` and ``UNIQ_KEY`` properties, what
sparkmq's producer sends; ``--tags-keys`` adds ``TAGS`` and ``KEYS``) and every PULL_MESSAGE
(``maxMsgNums`` 32, successive offsets of 4 queues) is encoded before the clock starts, and a
response lets the next request go (a window of ``--inflight``, 128). The client only reads the
response codes, so it costs little next to the broker.

The figure that matters on a shared machine is the broker's CPU per request: user + system
time of the broker process (``/proc/<pid>/stat``, 10 ms ticks) over the case, divided by the
requests. Throughput is printed too but moves with whatever else runs. Results are in
docs/benchmarks.md (Broker section).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

from bench_profile import Spy

from bench_common import REPO, Service, bench_root, machine

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from sparkmq.message.properties import encode_properties
from sparkmq.protocol import RemotingCommand, RequestCode

QUEUES = 4
BODY_BYTES = 100
PULL_BATCH = 32
_LENGTH = struct.Struct(">I")


class BrokerProcess(Service):
    """``sparkmq broker`` as a subprocess; ``host`` and ``port`` come from its ready line."""

    def __init__(self, store_dir: Path, flush: str, loop: str) -> None:
        args = ["broker", "--host", "127.0.0.1", "--port", "0", "--store-dir", str(store_dir), "--flush", flush]
        super().__init__(args, "broker listening on ", env={"SPARKMQ_EVENT_LOOP": loop})
        host, port = self.address.rsplit(":", 1)
        self.host, self.port = host, int(port)


class Window(asyncio.Protocol):
    """Writes pre-encoded frames, keeping ``inflight`` unanswered; counts responses by code."""

    def __init__(self, frames: list[bytes], inflight: int) -> None:
        self.frames = frames
        self.inflight = inflight
        self.next = 0
        self.answered = 0
        self.failed: dict[int, int] = {}
        self.buffer = bytearray()
        self.done = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def start(self) -> None:
        self._send(self.inflight)

    def _send(self, count: int) -> None:
        assert self.transport is not None
        stop = min(self.next + count, len(self.frames))
        if stop > self.next:
            self.transport.writelines(self.frames[self.next : stop])
            self.next = stop

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        position, answered = 0, 0
        while len(buffer) - position >= 8:
            (length,) = _LENGTH.unpack_from(buffer, position)
            if len(buffer) - position - 4 < length:
                break
            header = bytes(buffer[position + 8 : position + 40])
            if not header.startswith(b'{"code":0,'):
                code = int(header[8 : header.index(b",")])
                self.failed[code] = self.failed.get(code, 0) + 1
            position += 4 + length
            answered += 1
        del buffer[:position]
        self.answered += answered
        self._send(answered)
        if self.answered == len(self.frames) and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost after {self.answered} responses: {exc}"))


def send_frames(topic: str, count: int, tags_keys: bool, opaque: int) -> list[bytes]:
    prefix = os.urandom(8).hex().upper()
    body = os.urandom(BODY_BYTES)
    frames = []
    for i in range(count):
        props = {"WAIT": "true", "UNIQ_KEY": f"{prefix}{i:016X}"}
        if tags_keys:
            props.update(TAGS="TagA", KEYS=f"order-{i}")
        fields = {
            "a": "PID_BENCH",
            "b": topic,
            "c": "TBW102",
            "d": str(QUEUES),
            "e": str(i % QUEUES),
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": encode_properties(props).decode(),
            "j": "0",
            "k": "false",
            "m": "false",
        }
        frames.append(
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque + i, ext_fields=fields, body=body).encode()
        )
    return frames


def pull_frames(topic: str, count: int, stored: int, opaque: int, batch: int = PULL_BATCH) -> list[bytes]:
    """``count`` pulls of ``batch`` messages, cycling over the offsets of the ``stored`` messages."""
    frames = []
    rounds = max(stored // QUEUES // batch, 1)
    for i in range(count):
        queue, offset = i % QUEUES, (i // QUEUES) % rounds * batch
        fields = {
            "consumerGroup": "CID_BENCH",
            "topic": topic,
            "queueId": str(queue),
            "queueOffset": str(offset),
            "maxMsgNums": str(batch),
            "sysFlag": "6",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
            "expressionType": "TAG",
        }
        frames.append(RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque + i, ext_fields=fields).encode())
    return frames


async def run_window(
    broker: BrokerProcess, frames: list[bytes], inflight: int
) -> tuple[float, float, float, dict[int, int]]:
    """(seconds, broker user CPU seconds, broker system CPU seconds, failed response codes)."""
    loop = asyncio.get_running_loop()
    transport, window = await loop.create_connection(lambda: Window(frames, inflight), broker.host, broker.port)
    try:
        user, system = broker.cpu_times()
        started = time.perf_counter()
        window.start()
        await window.done
        user_after, system_after = broker.cpu_times()
        return time.perf_counter() - started, user_after - user, system_after - system, window.failed
    finally:
        transport.close()


async def run(broker: BrokerProcess, args: argparse.Namespace) -> list[str]:
    rows = []
    warm = send_frames("BenchReq", QUEUES, False, 1)  # the topic is created outside the clock
    await run_window(broker, warm, QUEUES)
    cases = [
        ("send x1", send_frames("BenchReq", args.sends, args.tags_keys, 100)),
        (f"pull {args.pull_batch}", pull_frames("BenchReq", args.pulls, args.sends, 10_000_000, args.pull_batch)),
    ]
    for case, frames in cases:
        spy = Spy(broker.process.pid, args.profile / f"{case.replace(' ', '-')}.txt") if args.profile else None
        if spy is not None:
            time.sleep(1.0)  # attached before the clock starts
        seconds, user, system, failed = await run_window(broker, frames, args.inflight)
        if spy is not None:
            spy.stop()
        if failed:
            raise RuntimeError(f"{case}: responses with codes {failed}")
        per = 1e6 / len(frames)
        rows.append(
            f"| {case}, {args.inflight} in flight | {len(frames):,} | {len(frames) / seconds:,.0f} | "
            f"{(user + system) * per:.1f} | {user * per:.1f} / {system * per:.1f} |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=40_000, help="single sends (default 40,000)")
    parser.add_argument("--pulls", type=int, default=10_000, help="pulls (default 10,000)")
    parser.add_argument("--inflight", type=int, default=128, help="requests in flight (default 128)")
    parser.add_argument(
        "--pull-batch",
        type=int,
        default=PULL_BATCH,
        help="messages per pull (default 32; 4096 with --inflight 4 is a Spark read task's pulls)",
    )
    parser.add_argument("--tags-keys", action="store_true", help="give every message TAGS and KEYS")
    parser.add_argument("--flush", choices=("async", "sync"), default="async")
    parser.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="the broker's event loop (SPARKMQ_EVENT_LOOP)",
    )
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the broker per case (raw stacks)")
    args = parser.parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    info = machine()
    root = Path(tempfile.mkdtemp(prefix="sparkmq-request-bench-", dir=bench_root()))
    broker = BrokerProcess(root / "store", args.flush, args.loop)
    try:
        rows = asyncio.run(run(broker, args))
    finally:
        broker.stop()
        shutil.rmtree(root)
    print(
        f"{info['date']} | {info.get('commit', '')} | flush {args.flush} | loop {args.loop} | load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    print("| case | requests | requests/s | broker CPU µs/request | user / system |\n|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
