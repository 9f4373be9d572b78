"""Client consume benchmark: ``pull_raw`` (no objects, the Spark path) and ``poll`` (``ReceivedMessage`` objects).

Run from the repo root::

    .venv/bin/python bench/client_consume_bench.py --quick

Writes ``--messages`` messages (default 204,800 of 100 B, 102,400 of 1 KiB) with ``send_batch``
256 into a 4-queue topic of a fresh ``sparkmq dev``, then times, for each body size:

* ``pull_raw``: ``AsyncPullConsumer.pull_raw`` of every queue concurrently, ``maxMessages`` 4096
  (the broker's cap), records counted with ``record_starts``: no per-message objects;
* ``poll``: ``AsyncPullConsumer.poll(max_messages=4096)`` of the same, every record a
  ``ReceivedMessage`` and its body bytes checked (read, so a lazy decode pays for it here).

CPU columns as in ``client_send_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from bench_common import (
    REPO,
    Recorder,
    machine,
    print_machine,
    producer_and_consumer,
    recording,
    table,
    temp_root,
)

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from client_send_bench import SIZES, send_batches, subscribed_queues

from sparkmq.client import AsyncPullConsumer, MessageQueue
from sparkmq.message.record import record_starts

PULL_MAX = 4096  # the broker's maxTransferCountOnMessageInMemory


async def pull_raw(
    bench: Recorder, consumer: AsyncPullConsumer, queues: list[MessageQueue], size: int, expected: int
) -> None:
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

    await bench.timed(f"pull_raw {PULL_MAX}, record_starts", size, expected, work, f"{len(queues)} queues concurrently")
    if sum(counts) != expected:
        raise RuntimeError(f"pull_raw read {sum(counts)} messages, expected {expected}")


async def poll(bench: Recorder, consumer: AsyncPullConsumer, size: int, expected: int) -> None:
    got: list[int] = [0, 0]

    async def work() -> None:
        for _ in range(expected // 64 + 100):  # bounded
            messages = await consumer.poll(timeout_s=0.0, max_messages=PULL_MAX)
            if not messages:
                break
            got[0] += len(messages)
            got[1] += sum(len(m.body) for m in messages)

    await bench.timed(f"poll {PULL_MAX} → ReceivedMessage", size, expected, work, "queues in turn")
    if got[0] != expected or got[1] != expected * size:
        raise RuntimeError(f"poll read {got[0]} messages / {got[1]} body bytes, expected {expected}")


async def consume_cases(bench: Recorder, consumer: AsyncPullConsumer, topic: str, size: int, expected: int) -> None:
    """``pull_raw`` then ``poll`` of everything in ``topic`` (``expected`` messages)."""
    queues = await subscribed_queues(consumer, topic)
    await pull_raw(bench, consumer, queues, size, expected)
    await consumer.assign(queues)
    for queue in queues:
        consumer.seek(queue, 0)
    await poll(bench, consumer, size, expected)


async def _async_main(bench: Recorder, scale: int) -> None:
    async with producer_and_consumer(bench.dev.namesrv, "CLIENT_CONSUME_BENCH") as (producer, consumer):
        for size in SIZES:
            topic = f"ClientConsumeBench{size}"
            count = (204_800 if size == 100 else 102_400) // scale
            await send_batches(bench, producer, bench.messages(topic, count, size), size, 256)
            await consume_cases(bench, consumer, topic, size, count)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    args = parser.parse_args(argv)
    info = machine()
    with temp_root("sparkmq-client-consume-bench-") as root, recording(root) as bench:
        asyncio.run(_async_main(bench, 10 if args.quick else 1))
    print_machine(info)
    print("\n## sparkmq consume\n\n" + table(bench.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
