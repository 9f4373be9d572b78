"""Client overlap benchmark: do the client and the broker work at once, or take turns?

Pipelined single sends of 100 B (``--inflight`` 128) from one ``AsyncProducer`` against a real
``sparkmq dev``, in both shapes ``client_send_bench.py`` has (``await`` × N coroutines, and
``send_async`` in one loop, nats-py raw's shape). Besides msgs/s and CPU µs per message, each row
splits the wall time per message of the client's and the broker's main threads into on-CPU, waiting
on the run queue (the machine is busy) and asleep (nothing to do: waiting for the other side), from
``/proc/PID/schedstat``, and counts the write and read syscalls per message (``/proc/PID/io``).
Taking turns shows as a client asleep while the broker works; overlapping as wall ≈ the larger CPU.

``--chunk-frames`` sets ``ClientConnection``'s ``LEAN_CHUNK_FRAMES`` for an A/B in one sitting (a
large value: the whole turn in one write, as before branch sendoverlap)::

    .venv/bin/python bench/client_overlap_bench.py
    .venv/bin/python bench/client_overlap_bench.py --chunk-frames 1000000 64 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from client_send_bench import windowed

from bench_common import REPO, DevProcess, loadavg, machine, own_cpu_seconds, print_machine, run_loop, temp_root

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from sparkmq.client import AsyncProducer, Message
from sparkmq.remoting import client_connection


def sched(pid: int) -> tuple[int, int]:
    """ns on CPU and ns waiting on a run queue, of the process's main thread."""
    on_cpu, waiting, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(on_cpu), int(waiting)


def syscalls(pid: int) -> tuple[int, int]:
    """read and write syscalls of the process so far."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


def split(before: tuple[int, int], after: tuple[int, int], wall_ns: float, n: int) -> str:
    on_cpu, waiting = (after[0] - before[0]) / n / 1e3, (after[1] - before[1]) / n / 1e3
    return f"{on_cpu:.1f} / {waiting:.1f} / {wall_ns / n / 1e3 - on_cpu - waiting:.1f}"


async def measure(dev: DevProcess, chunks: Sequence[int], rounds: int, sends: int, inflight: int) -> list[str]:
    rows = []
    body = random.Random(42).randbytes(100)
    topic = "ClientOverlap"
    async with AsyncProducer("PID_CLIENT_OVERLAP", dev.namesrv, send_timeout_s=30.0) as producer:
        for message in [Message(topic, body) for _ in range(8)]:  # auto-create, route, connection
            await producer.send(message)
        for round_ in range(rounds):
            for chunk in chunks:
                client_connection.LEAN_CHUNK_FRAMES = chunk
                pid = dev.process.pid
                for shape in ("await", "send_async"):
                    messages = [Message(topic, body) for _ in range(sends)]
                    broker, me = pid, os.getpid()
                    s_broker, s_client, io_broker, io_client = sched(broker), sched(me), syscalls(pid), syscalls(me)
                    cpu_broker, cpu_client, started = dev.cpu_seconds(), own_cpu_seconds(), time.perf_counter()
                    if shape == "await":
                        items = iter(messages)

                        async def worker(items: Iterator[Message] = items) -> None:
                            for message in items:
                                await producer.send(message)

                        await asyncio.gather(*(worker() for _ in range(inflight)))
                    else:
                        await windowed(producer, messages, inflight)
                    wall = (time.perf_counter() - started) * 1e9
                    cpu_b = (dev.cpu_seconds() - cpu_broker) / sends * 1e6
                    cpu_c = sum(own_cpu_seconds()) - sum(cpu_client)
                    r_c, w_c = (a - b for a, b in zip(syscalls(me), io_client, strict=True))
                    r_b, w_b = (a - b for a, b in zip(syscalls(pid), io_broker, strict=True))
                    rows.append(
                        f"| {round_} | {chunk:,} | {shape} | {sends / wall * 1e9:,.0f} | {cpu_b:.1f} | "
                        f"{cpu_c / sends * 1e6:.1f} | {split(s_client, sched(me), wall, sends)} | "
                        f"{split(s_broker, sched(broker), wall, sends)} | "
                        f"{w_c / sends * 128:.1f} / {r_c / sends * 128:.1f} | "
                        f"{w_b / sends * 128:.1f} / {r_b / sends * 128:.1f} | {loadavg().split()[0]} |"
                    )
                    print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=100_000, help="sends per case (default 100,000)")
    parser.add_argument("--inflight", type=int, default=128, help="sends in flight (default 128)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every case (default 2)")
    parser.add_argument(
        "--chunk-frames",
        type=int,
        nargs="+",
        default=[client_connection.LEAN_CHUNK_FRAMES],
        help="LEAN_CHUNK_FRAMES values to compare (default: the code's)",
    )
    args = parser.parse_args(argv)
    info = machine()
    with temp_root("sparkmq-client-overlap-") as root:
        dev = DevProcess(root / "store")
        try:
            rows = run_loop(measure(dev, args.chunk_frames, args.rounds, args.sends, args.inflight), "uvloop")
        finally:
            dev.stop()
    print_machine(info)
    print(
        "\n| round | chunk frames | shape | msgs/s | broker CPU µs/msg | client CPU µs/msg | client main thread "
        "µs/msg on CPU / run queue / asleep | broker main thread, same | client writes / reads per 128 msgs "
        "| broker writes / reads per 128 | load |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
