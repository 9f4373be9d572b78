"""Fuzz bench: a million malformed or hostile frames at a real broker and NameServer, a healthy client throughout.

Each connection carries ``--batch`` well-framed requests with hostile headers (lone surrogates,
NULs and over-long values in fields, 5,000-digit integers, missing fields, unknown codes, random
topics, oneway flags), then one fatal piece (random bytes, a bad length prefix, a truncated
frame, a non-JSON or huge-integer header), and half-closes. Every response is read. Every
``--verify-every``-th connection is checked against the sans-I/O oracle: each request decoded
before the fatal piece answered exactly once. A healthy client sends and reads back its own
messages on another thread the whole time; at the end every message it was acknowledged must
still be there, and both processes must be alive.

    .venv/bin/python bench/fuzz_bench.py                       # 1,000,000 frames, ~2-4 min on 2 cores
    .venv/bin/python bench/fuzz_bench.py --frames 20000        # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_common import REPO, bench_root, machine  # noqa: E402 - bench/ is sys.path[0]

for path in (REPO, REPO / "tests"):  # the package, and the test helpers that start services
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from sparkmq.protocol import MAX_FRAME_BYTES, FrameDecoder, RequestCode
from support.hostile import HealthyLoop, expected_answers, raw_frame, raw_request
from support.processes import BrokerProcess, NamesrvProcess

CODES = [
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.GET_ROUTEINFO_BY_TOPIC,
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET,
    RequestCode.PULL_MESSAGE,
    RequestCode.HEART_BEAT,
    RequestCode.GET_ALL_TOPIC_CONFIG,
]
FIELDS = [
    "topic",
    "b",
    "a",
    "e",
    "brokerName",
    "brokerAddr",
    "clusterName",
    "brokerId",
    "topicFilterType",
    "consumerGroup",
    "queueId",
    "queueOffset",
    "maxMsgNums",
    "sysFlag",
]
UNFIT = ["\ud800", "Nope\udfff", "a\x00b", "x" * 40_000]


def hostile_requests(rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    """(kind, frame) pairs: well-framed requests whose headers are hostile."""
    pool: list[tuple[str, bytes]] = []
    for i in range(count):
        kind = rng.choice(["unfit-text", "huge-int", "missing-fields", "unknown-code", "random-fields", "oneway"])
        code: int | str = rng.choice(CODES)
        ext = {rng.choice(FIELDS): rng.choice(["T", "TBW102", "0", "-1", "%RETRY%g"]) for _ in range(rng.randint(0, 4))}
        if kind == "unfit-text":
            ext[rng.choice(FIELDS)] = rng.choice(UNFIT[:3] * 20 + UNFIT[3:])  # the 40,000-char value now and then
        elif kind == "huge-int":
            ext[rng.choice(["queueId", "queueOffset", "brokerId", "maxMsgNums", "e"])] = "9" * 5000
        elif kind == "missing-fields":
            ext = {}
        elif kind == "unknown-code":
            code = rng.randint(5000, 30000)
        elif kind == "random-fields":
            ext = {
                rng.choice(FIELDS): "".join(chr(rng.randint(32, 0x2FF)) for _ in range(rng.randint(0, 12)))
                for _ in range(rng.randint(1, 6))
            }
        frame = raw_request(code, i, ext)
        if kind == "oneway":
            frame = frame.replace(b'"flag":0', b'"flag":2', 1)
        pool.append((kind, frame))
    return pool


def fatal_piece(rng: random.Random, pool: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    """One piece that must close the connection (or leave an unfinished frame before the EOF)."""
    kind = rng.choice(["random-bytes", "bad-length", "truncated", "huge-int-header", "not-json"])
    if kind == "random-bytes":
        return kind, rng.randbytes(rng.randint(1, 64))
    if kind == "bad-length":
        length = rng.choice([0, 1, 3, MAX_FRAME_BYTES, 2**31, 2**32 - 1])
        return kind, struct.pack(">I", length) + rng.randbytes(rng.randint(0, 16))
    if kind == "truncated":
        frame = rng.choice(pool)[1]
        return kind, frame[: rng.randint(1, len(frame) - 1)]
    if kind == "huge-int-header":
        return kind, raw_frame(b'{"code":' + b"7" * 5000 + b',"opaque":1}')
    return kind, raw_frame(b"{not json" + rng.randbytes(8))


class Stats:
    def __init__(self) -> None:
        self.frames: Counter[str] = Counter()
        self.connections = 0
        self.answers = 0
        self.verified = 0
        self.mismatches: list[str] = []


async def one_connection(address: str, stream: bytes, verify: bool, stats: Stats) -> None:
    reader, writer = await asyncio.open_connection(*address.rsplit(":", 1))
    decoder, responses = FrameDecoder(), []
    try:
        writer.write(stream)
        writer.write_eof()
        while data := await reader.read(1 << 20):
            responses += decoder.feed(data)
    except (ConnectionResetError, BrokenPipeError):
        pass  # the server hung up on the fatal piece with our bytes unread: expected
    finally:
        writer.close()
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # same: already closed by the server
            await writer.wait_closed()
    stats.connections += 1
    stats.answers += len(responses)
    if verify:
        stats.verified += 1
        expected, got = Counter(expected_answers(stream)), Counter(r.opaque for r in responses)
        if expected != got:
            stats.mismatches.append(f"{address}: expected {sum(expected.values())} answers, got {sum(got.values())}")


async def fuzz(
    targets: list[str], total: int, batch: int, workers: int, verify_every: int, seed: int, stats: Stats
) -> None:
    rng = random.Random(seed)
    pool = hostile_requests(rng, 4096)
    queue: asyncio.Queue[tuple[str, bytes, bool] | None] = asyncio.Queue(maxsize=workers * 4)

    async def worker() -> None:
        while (job := await queue.get()) is not None:
            await one_connection(*job, stats)

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    sent, connection, next_report = 0, 0, 100_000
    while sent < total:
        picks = rng.choices(pool, k=batch)
        fatal_kind, fatal = fatal_piece(rng, pool)
        stats.frames.update([kind for kind, _ in picks] + [fatal_kind])
        stream = b"".join(frame for _, frame in picks) + fatal
        await queue.put((targets[connection % len(targets)], stream, connection % verify_every == 0))
        sent += batch + 1
        connection += 1
        if sent >= next_report:
            print(f"  {sent:,} frames on {connection:,} connections", flush=True)
            next_report += 100_000
    for _ in tasks:
        await queue.put(None)
    await asyncio.gather(*tasks)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames to send in all (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=50, help="hostile requests per connection before its fatal piece")
    parser.add_argument("--workers", type=int, default=8, help="connections open at once")
    parser.add_argument("--verify-every", type=int, default=20, help="check every n-th connection's answers exactly")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    print(json.dumps(machine(), indent=1))
    store = Path(tempfile.mkdtemp(prefix="fuzz-bench-", dir=bench_root()))
    stats = Stats()
    try:
        with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address) as broker:
            rss_before = (rss_mb(broker.pid), rss_mb(namesrv.pid))
            # Two connections of three go to the broker, one to the NameServer.
            targets = [broker.address, broker.address, namesrv.address]
            with HealthyLoop(broker.address) as healthy:
                healthy.wait_for_round_trips(1)
                started = time.monotonic()
                asyncio.run(fuzz(targets, args.frames, args.batch, args.workers, args.verify_every, args.seed, stats))
                elapsed = time.monotonic() - started
                healthy.wait_for_round_trips(1)
                healthy.stop()
            alive = broker.process.poll() is None and namesrv.process.poll() is None
            rss_after = (rss_mb(broker.pid), rss_mb(namesrv.pid))
            logs = broker.output + namesrv.output
            tracebacks = sum("Traceback" in line for line in logs)
            fatal = sum("Fatal error" in line or "UnicodeEncodeError" in line for line in logs)
    finally:
        shutil.rmtree(store, ignore_errors=True)

    total = sum(stats.frames.values())
    print(
        f"frames sent: {total:,} on {stats.connections:,} connections in {elapsed:.1f} s "
        f"({total / elapsed:,.0f} frames/s); answers read: {stats.answers:,}"
    )
    print("by kind: " + ", ".join(f"{kind} {n:,}" for kind, n in sorted(stats.frames.items())))
    print(
        f"oracle: {stats.verified:,} connections checked exactly, {len(stats.mismatches)} mismatches "
        + "; ".join(stats.mismatches[:5])
    )
    print(f"healthy client: {healthy.round_trips:,} round trips (send + read back), none failed, nothing lost")
    print(
        f"services alive: {alive}; RSS broker {rss_before[0]:.0f} -> {rss_after[0]:.0f} MB, "
        f"namesrv {rss_before[1]:.0f} -> {rss_after[1]:.0f} MB; "
        f"log tracebacks {tracebacks}, fatal/encode errors {fatal}"
    )
    return 0 if alive and not stats.mismatches and not fatal else 1


if __name__ == "__main__":
    raise SystemExit(main())
