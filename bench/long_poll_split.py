"""Where send -> long-poll delivery spends its time, seen from the client (one message in flight).

Run from the repo root::

    .venv/bin/python bench/long_poll_split.py     # ~10 s

``latency_bench.py``'s long-poll case (a poll parked 2 ms before each send) with the client's
socket reads timestamped. Per delivery, medians in µs from the send's start: the first read (the
send's response), the second (the woken pull's answer), ``send`` returned, ``poll`` returned, and
last read -> ``poll`` returned (the client's own work on the pull's answer).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import REPO, run_loop, temp_root

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from latency_bench import DevWithGcLog

from sparkmq.client import AsyncProducer, AsyncPullConsumer, Message
from sparkmq.remoting.connection import RemotingConnection

DELIVERIES = 1500
reads: list[int] = []  # this process's data_received times of the current delivery


def _timestamped(receive: Any) -> Any:
    def data_received(self: RemotingConnection, data: bytes) -> None:
        reads.append(time.monotonic_ns())
        receive(self, data)

    return data_received


async def deliveries(dev: DevWithGcLog) -> None:
    producer = AsyncProducer("PID_SPLIT", dev.namesrv, send_timeout_s=30.0)
    consumer = AsyncPullConsumer("CID_SPLIT", dev.namesrv, auto_commit_interval_s=None)
    await producer.start()
    await consumer.start()
    message = Message("LatencyBench", bytes(100))
    for _ in range(200):
        await producer.send(message)
    queue = (await consumer.queues_of("LatencyBench"))[0]
    await consumer.assign([queue])
    await consumer.seek_to_end(queue)
    rows: list[tuple[int, int, int, list[int]]] = []
    for _ in range(DELIVERIES):
        polled = asyncio.ensure_future(consumer.poll(timeout_s=5.0))
        await asyncio.sleep(0.002)
        reads.clear()
        started = time.monotonic_ns()
        await producer.send(message, queue=queue)
        sent = time.monotonic_ns()
        if len(await polled) != 1:
            raise RuntimeError("the long poll did not return the one message sent")
        rows.append((started, sent, time.monotonic_ns(), list(reads)))
    await consumer.close()
    await producer.close()

    def median(values: list[int]) -> float:
        return statistics.median(values) / 1000

    two = [r for r in rows if len(r[3]) >= 2]
    print(
        f"{len(rows)} deliveries ({len(two)} with 2+ reads), p50 µs from the send's start: "
        f"1st read {median([r[3][0] - r[0] for r in two]):.0f}, 2nd read {median([r[3][1] - r[0] for r in two]):.0f}, "
        f"send returned {median([r[1] - r[0] for r in rows]):.0f}, "
        f"poll returned {median([r[2] - r[0] for r in rows]):.0f}; "
        f"last read -> poll returned {median([r[2] - r[3][-1] for r in rows if r[3]]):.0f}"
    )


def main() -> int:
    RemotingConnection.data_received = _timestamped(RemotingConnection.data_received)  # type: ignore[method-assign]
    with temp_root("sparkmq-long-poll-split-") as root:
        dev = DevWithGcLog(Path(root), "on", "landed", "auto")
        try:
            run_loop(deliveries(dev), "uvloop")
        finally:
            dev.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
