"""Client CPU per pipelined single send, with the broker's answers made in-process: the client alone.

A real ``sparkmq dev`` gives the producer its route and connection (and takes a few warm-up sends);
then the connection's transport is replaced by one that answers every write at once, in the next
loop callback, with the broker's own SUCCESS header shape: no syscalls, no broker CPU, no waiting.
What is left is the client's Python and C per send and per answer, in both shapes of
``client_send_bench.py`` (``await`` × ``--inflight`` coroutines, and ``send_async`` in one loop
with a semaphore window, nats-py raw's shape). On a shared machine this is the steadiest figure of the
client's cost (process CPU time per message; the msgs/s column moves with the machine's load)::

    .venv/bin/python bench/client_cpu_bench.py --rounds 3

Instructions per send, under callgrind: ``--callgrind-dumps`` dumps the counts at each case's start and end
(``callgrind_control -d``), so a dump named ``<case> <sends>`` holds that window alone, without the start-up's
polling of the broker (which moves with the machine's load); ``--sends 2000,12000`` runs both windows in one
process: (second - first) / 10,000 is the per-send figure::

    valgrind --tool=callgrind .venv/bin/python bench/client_cpu_bench.py --rounds 1 --cases async \\
        --sends 2000,12000 --callgrind-dumps

Under callgrind a send takes about a millisecond of wall time, and 128 in flight make every answer look slow,
so two things a real run does once per ~200 sends, or never, would run per send: the render of the message
ids' head (once per millisecond) and the fault bookkeeping of an answer slower than 550 ms (which pauses the
broker and sends the next attempts the long way). ``--callgrind-dumps`` therefore holds the producer's wall
clock still and keeps slow answers from pausing the broker: the count is a real run's per-send work.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from client_send_bench import windowed

from bench_common import REPO, DevProcess, loadavg, run_loop, temp_root

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

import sparkmq.client.producer as producer_module
from sparkmq.client import AsyncProducer, Message

_FIELDS = (
    b'"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{"msgId":"7F0000010000B1FB00000000000002EB",'
    b'"queueId":"1","queueOffset":"5","MSG_REGION":"DefaultRegion","TRACE_ON":"true"}}'
)


def answer(opaque: int) -> bytes:
    """The broker's SUCCESS answer to the request ``opaque``, framed."""
    header = b'{"code":0,"flag":1,"language":"JAVA","opaque":%d,' % opaque + _FIELDS
    return struct.pack(">II", len(header) + 4, len(header)) + header


_HEADER_START = b'{"code":'  # each request frame's header starts so (the bodies here are random bytes)


class AnsweringTransport:
    """Answers every request frame written, whatever the writes' split into items (a frame in several items, or
    several frames in one): the frames are counted by their headers' start in the written bytes (one fast
    search per write, so the transport's own cost per send stays small) and answered, in order, from answers
    made beforehand for the opaques ``first`` on (a connection numbers its requests in order)."""

    def __init__(self, connection: Any, first: int, count: int, loop: asyncio.AbstractEventLoop) -> None:
        self.connection, self.loop = connection, loop
        self.answers = [answer((first + i) & 0x7FFFFFFF) for i in range(count)]
        self.next = 0
        self.writes = 0

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.writelines((data,))

    def writelines(self, items: Any) -> None:
        self.writes += 1
        count = b"".join(items).count(_HEADER_START)
        data = b"".join(self.answers[self.next : self.next + count])
        self.next += count
        self.loop.call_soon(self.connection.data_received, data)


def dump(enabled: bool, name: str) -> None:
    """Under callgrind, dump the counts so far as ``name`` (the next dump holds what follows alone)."""
    if enabled:
        subprocess.run(["callgrind_control", "-d", name, str(os.getpid())], stdout=subprocess.DEVNULL, check=True)


async def worker(producer: AsyncProducer, pending: Iterator[Message]) -> None:
    for message in pending:
        await producer.send(message)


async def run(args: argparse.Namespace, dev: DevProcess) -> None:
    producer = AsyncProducer("PID_CPU_BENCH", dev.namesrv, send_timeout_s=30.0)
    await producer.start()
    topic, body = "CpuBench", os.urandom(args.size)
    for _ in range(8):
        await producer.send(Message(topic, body))
    if args.callgrind_dumps:  # the module's "Under callgrind": what a real run does per ms or per slow answer
        producer_module._time_ns = itertools.repeat(time.time_ns()).__next__
        producer.faults.succeeded = lambda broker_name, latency_ms: None
    connection = next(iter(producer._lanes[topic].connections.values()))
    real = connection._transport
    windows = [(r, c, int(n)) for r in range(args.rounds) for c in args.cases.split(",") for n in args.sends.split(",")]
    for round_, case, sends in windows:
        messages = [Message(topic, body) for _ in range(sends)]
        first = connection.next_opaque() + 1
        connection._transport = fake = AnsweringTransport(connection, first, sends + 10, asyncio.get_running_loop())
        dump(args.callgrind_dumps, f"before {case} {sends}")
        cpu, wall = time.process_time(), time.perf_counter()
        if case == "await":
            pending = iter(messages)
            await asyncio.gather(*(worker(producer, pending) for _ in range(args.inflight)))
        else:
            await windowed(producer, messages, args.inflight)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        dump(args.callgrind_dumps, f"{case} {sends}")
        connection._transport = real
        print(
            f"round {round_} {case:6} {sends:>7,} sends {sends / wall:>9,.0f} msgs/s  client CPU"
            f" {cpu / sends * 1e6:4.2f} us/msg  writes {fake.writes}  load {loadavg()}",
            flush=True,
        )
    await producer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", default="100000", help="sends per case, or a comma-separated list (default 100000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every case (default 3)")
    parser.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    parser.add_argument("--inflight", type=int, default=128, help="sends in flight (default 128)")
    parser.add_argument("--cases", default="await,async", help="await and/or async (default both)")
    parser.add_argument("--loop", default="uvloop", choices=("uvloop", "asyncio"))
    parser.add_argument("--callgrind-dumps", action="store_true", help="under callgrind: dump around each case")
    args = parser.parse_args()
    with temp_root("cpu-bench-") as root:
        dev = DevProcess(root / "store")
        try:
            run_loop(run(args, dev), args.loop)
        finally:
            dev.stop()


if __name__ == "__main__":
    main()
