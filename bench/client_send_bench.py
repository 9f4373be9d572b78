"""Client send benchmark: ``AsyncProducer`` / ``Producer`` single sends and batches against one ``sparkmq dev``.

Run from the repo root (``--quick``: a tenth of the messages; full counts are for a quiet machine)::

    .venv/bin/python bench/client_send_bench.py --quick
    .venv/bin/python bench/client_send_bench.py --profile DIR --latency-sends 10000   # + py-spy, broker and client

Cases, for 100 B and 1 KiB bodies (messages built before the clock starts; everything a
client does per send — ids, properties, encoding, routing, the response — is inside it):

* ``send x1, 1 in flight``: ``AsyncProducer.send`` one after another; also the send latency;
* ``send x1, N in flight``: ``AsyncProducer.send`` pipelined (``--inflight``, 128), N coroutines;
* ``send_async x1, N in flight, one loop``: nats-py ``raw``'s shape: one loop keeps a window of N with
  ``AsyncProducer.send_async`` callbacks (no coroutine or Task per send);
* ``send_batch 32`` / ``send_batch 256``: ``AsyncProducer.send_batch``, 8 batches in flight;
* ``ping``: ``GET_MAX_OFFSET`` one at a time: client + remoting + broker without the store's put;
* ``asyncio echo``: a bare asyncio echo server process, 100 B each way: the loopback floor;
* ``Producer.send (blocking)``: the blocking facade, one at a time; latency.

CPU columns are user + system µs per message: the dev process's from /proc (10 ms ticks), this
process's from getrusage (all its threads). ``client_bench.py`` runs these and the consume
cases together, beside the peers.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench_common import (
    REPO,
    Recorder,
    add_loop_argument,
    machine,
    print_machine,
    producer_and_consumer,
    recording,
    run_loop,
    table,
    temp_root,
)

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from sparkmq.client import (
    AsyncProducer,
    AsyncPullConsumer,
    Message,
    MessageQueue,
    Producer,
    SendResult,
)
from sparkmq.errors import TopicNotExistError

SIZES = (100, 1024)
BATCH_INFLIGHT = 8
ECHO_SERVER = """
import asyncio, sys
class Echo(asyncio.Protocol):
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.transport.write(data)
async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the bench closes stdin
asyncio.run(main())
"""


async def send_sequential(bench: Recorder, producer: AsyncProducer, messages: list[Message], size: int) -> None:
    samples: list[float] = []

    async def work() -> None:
        for message in messages:
            started = time.perf_counter_ns()
            await producer.send(message)
            samples.append((time.perf_counter_ns() - started) / 1000)

    await bench.timed("send x1, 1 in flight (AsyncProducer)", size, len(messages), work, "latency", samples)


async def send_pipelined(
    bench: Recorder, producer: AsyncProducer, messages: list[Message], size: int, inflight: int
) -> None:
    items = iter(messages)

    async def worker() -> None:
        for message in items:  # one shared iterator: each message is sent once
            await producer.send(message)

    await bench.timed(
        f"send x1, {inflight} in flight",
        size,
        len(messages),
        lambda: asyncio.gather(*(worker() for _ in range(inflight))),
    )


async def windowed(producer: AsyncProducer, messages: list[Message], inflight: int) -> None:
    """nats-py ``raw``'s shape (../shared/peers/bench_nats.py): one loop keeps ``inflight`` sends going, a
    semaphore window released by each ``send_async`` callback; no coroutine or Task per send."""
    window = asyncio.Semaphore(inflight)
    finished = asyncio.get_running_loop().create_future()
    left = len(messages)

    def acked(done: asyncio.Future[SendResult]) -> None:
        nonlocal left
        done.result()  # a failed send's error reaches the callback's log
        window.release()
        left -= 1
        if not left:
            finished.set_result(None)

    for message in messages:
        await window.acquire()
        producer.send_async(message, acked)
    await finished


async def send_windowed(
    bench: Recorder, producer: AsyncProducer, messages: list[Message], size: int, inflight: int
) -> None:
    await bench.timed(
        f"send_async x1, {inflight} in flight, one loop",
        size,
        len(messages),
        lambda: windowed(producer, messages, inflight),
        "nats-py raw's shape",
    )


async def send_batches(
    bench: Recorder, producer: AsyncProducer, messages: list[Message], size: int, batch: int
) -> None:
    batches = iter([messages[i : i + batch] for i in range(0, len(messages), batch)])

    async def worker() -> None:
        for chunk in batches:
            await producer.send_batch(chunk)

    await bench.timed(
        f"send_batch {batch}, {BATCH_INFLIGHT} in flight",
        size,
        len(messages),
        lambda: asyncio.gather(*(worker() for _ in range(BATCH_INFLIGHT))),
    )


async def ping(bench: Recorder, consumer: AsyncPullConsumer, queue: MessageQueue, count: int) -> None:
    samples: list[float] = []

    async def work() -> None:
        for _ in range(count):
            started = time.perf_counter_ns()
            await consumer.max_offset(queue)
            samples.append((time.perf_counter_ns() - started) / 1000)

    await bench.timed("ping: GET_MAX_OFFSET, 1 in flight", 0, count, work, "round-trip floor", samples)


async def echo_floor(bench: Recorder, count: int) -> None:
    """A bare asyncio echo server process and a stream client, 100 B each way: the loopback +
    event-loop round-trip floor on this machine (the peers' ``phys_tcp.py echo``)."""
    server = subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        payload, samples = bytes(100), []

        async def work() -> None:
            for _ in range(count):
                started = time.perf_counter_ns()
                writer.write(payload)
                await reader.readexactly(len(payload))
                samples.append((time.perf_counter_ns() - started) / 1000)

        for _ in range(100):  # warm-up
            writer.write(payload)
            await reader.readexactly(len(payload))
        await bench.timed(
            "asyncio echo 100 B, 1 in flight", 100, count, work, "loopback + event-loop floor; broker CPU n/a", samples
        )
        writer.close()
        await writer.wait_closed()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


async def subscribed_queues(consumer: AsyncPullConsumer, topic: str) -> list[MessageQueue]:
    for _ in range(100):  # the broker re-registers a new topic with the NameServer right away; allow a moment
        try:
            return await consumer.queues_of(topic)
        except TopicNotExistError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"topic {topic} never reached the NameServer")


async def send_cases(
    bench: Recorder, producer: AsyncProducer, size: int, scale: int, inflight: int, n_latency: int
) -> int:
    """Every send case for one body size; returns how many messages the batch-256 case wrote (for the consume cases)."""
    # The pipelined cases send as many messages as the peers' publish cases (../shared/peers): a run of
    # a few tenths of a second is mostly its start (first routes, buffers growing, a GC pass).
    n_seq, n_pipe = n_latency // scale, (200_000 if size == 100 else 100_000) // scale
    n32, n256 = (102_400 if size == 100 else 51_200) // scale, (204_800 if size == 100 else 102_400) // scale
    for tag in ("Seq", "Pipe", "B32", "B256"):  # auto-create, warm up
        warm = bench.messages(f"ClientBench{tag}{size}", 8, size)
        await producer.send_batch(warm)
        for m in warm[:4]:
            await producer.send(m)
    await send_sequential(bench, producer, bench.messages(f"ClientBenchSeq{size}", n_seq, size), size)
    await send_pipelined(bench, producer, bench.messages(f"ClientBenchPipe{size}", n_pipe, size), size, inflight)
    await send_windowed(bench, producer, bench.messages(f"ClientBenchPipe{size}", n_pipe, size), size, inflight)
    await send_batches(bench, producer, bench.messages(f"ClientBenchB32{size}", n32, size), size, 32)
    await send_batches(bench, producer, bench.messages(f"ClientBenchB256{size}", n256, size), size, 256)
    return n256 + 12


async def floor_cases(bench: Recorder, consumer: AsyncPullConsumer, count: int) -> None:
    """The ping and the echo floor (after the send cases created ClientBenchSeq100)."""
    queue = (await subscribed_queues(consumer, "ClientBenchSeq100"))[0]
    await consumer.max_offset(queue)
    await ping(bench, consumer, queue, count)
    await echo_floor(bench, count)


def blocking_cases(bench: Recorder, scale: int, n_latency: int) -> None:
    """``Producer.send`` from this (non-loop) thread: the blocking facade's latency."""
    with Producer("PID_CLIENT_BENCH_BLOCKING", bench.dev.namesrv, send_timeout_s=30.0) as producer:
        for size in SIZES:
            messages = bench.messages(f"ClientBenchBlock{size}", n_latency // scale, size)
            for m in messages[:20]:  # auto-create, warm up
                producer.send(m)
            samples: list[float] = []

            async def work(messages: list[Message] = messages, samples: list[float] = samples) -> None:
                for message in messages:
                    started = time.perf_counter_ns()
                    producer.send(message)
                    samples.append((time.perf_counter_ns() - started) / 1000)

            asyncio.run(
                bench.timed("Producer.send (blocking), 1 in flight", size, len(messages), work, "latency", samples)
            )


async def _async_main(bench: Recorder, scale: int, inflight: int, n_latency: int) -> None:
    async with producer_and_consumer(bench.dev.namesrv, "CLIENT_BENCH") as (producer, consumer):
        for size in SIZES:
            await send_cases(bench, producer, size, scale, inflight, n_latency)
        await floor_cases(bench, consumer, n_latency // scale)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    parser.add_argument("--inflight", type=int, default=128, help="pipelined single sends in flight (default 128)")
    parser.add_argument("--tags-keys", action="store_true", help="give every message TAGS and KEYS")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy broker and client during the 100 B cases")
    add_loop_argument(parser, "the event loop AsyncProducer/AsyncPullConsumer run on in this process (default asyncio)")
    parser.add_argument(
        "--latency-sends",
        type=int,
        default=10_000,
        help="sends (and pings, echoes) per latency case, and the peers' NLAT with --with-peers (default 10,000: "
        "p99 is then the 100th slowest, not the 20th)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    info = machine()
    with temp_root("sparkmq-client-send-bench-") as root, recording(root, args.tags_keys, args.profile) as bench:
        scale = 10 if args.quick else 1
        run_loop(_async_main(bench, scale, args.inflight, args.latency_sends), args.loop)
        blocking_cases(bench, scale, args.latency_sends)
    print_machine(info)
    print("\n## sparkmq sends\n\n" + table(bench.rows))
    if bench.profiles:
        print("\n## profiles (py-spy)\n\n" + "\n\n".join(bench.profiles))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
