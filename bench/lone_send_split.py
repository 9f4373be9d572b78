"""Where the broker's time goes inside one lone ``AsyncProducer.send`` (1 in flight, the send lane).

``sparkmq dev`` runs through a prelude that wraps ``RemotingConnection.data_received`` (wall and
thread CPU per read) and each connection's transport (the time spent in ``write``: the answer's
syscall, which on loopback also runs the client's TCP receive and wakes it). Timing starts on
SIGUSR1 after a warm-up and stops on SIGUSR2. The Python part of a lone send is the read's wall
time minus its write; p10 and p50 over ``--sends`` lone sends are robust against the other load
of a shared machine, where CPU-per-request figures of whole runs move ±30 %.

    PYTHONPATH=$PWD .venv/bin/python bench/lone_send_split.py --sends 5000   # ~10 s

Compare builds by running it from each checkout in turn (interleaved): the broker is started from
the checkout this script is in.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from collections.abc import Sequence

from bench_common import Service, loadavg, run_loop, temp_root
from sparkmq.client import AsyncProducer, AsyncPullConsumer, Message

PRELUDE = r"""
import json, os, signal, sys, time
from sparkmq.remoting.connection import RemotingConnection
on, walls, cpus, writes, spent = [False], [], [], [], [0]
wall_ns, cpu_ns = time.perf_counter_ns, time.thread_time_ns
served = RemotingConnection.data_received
made = RemotingConnection.connection_made

class TimedTransport:
    def __init__(self, transport):
        self._transport = transport
    def __getattr__(self, name):
        return getattr(self._transport, name)
    def write(self, data):
        start = wall_ns(); self._transport.write(data); spent[0] += wall_ns() - start
    def writelines(self, data):
        start = wall_ns(); self._transport.writelines(data); spent[0] += wall_ns() - start

def data_received(self, data):
    if not on[0]:
        return served(self, data)
    spent[0] = 0
    cpu, wall = cpu_ns(), wall_ns()
    served(self, data)
    wall, cpu = wall_ns() - wall, cpu_ns() - cpu
    walls.append(wall); cpus.append(cpu); writes.append(spent[0])

def connection_made(self, transport):
    made(self, transport)
    self._transport = TimedTransport(self._transport)

def start(_signum, _frame):
    on[0] = True

def stop(_signum, _frame):
    on[0] = False
    with open(os.environ["LONE_SEND_OUT"], "w") as out:
        json.dump([walls, cpus, writes], out)

RemotingConnection.data_received = data_received
RemotingConnection.connection_made = connection_made
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
sys.argv[0] = "sparkmq"
from sparkmq.cli.main import main
sys.exit(main())
"""


async def lone_sends(dev: Service, namesrv: str, sends: int, ping: bool = False) -> None:
    """Warm up, then ``sends`` lone sends (``ping``: GET_MAX_OFFSET requests) between the two
    signals (the request after each signal lets the broker's main thread run its handler before
    the next measured read)."""
    producer = AsyncProducer("PID_LONE_SPLIT", namesrv, send_timeout_s=30.0)
    await producer.start()
    consumer = AsyncPullConsumer("CID_LONE_SPLIT", namesrv, auto_commit_interval_s=None)
    message = Message("LoneSendSplit", bytes(100))
    try:
        await producer.send(message)  # creates the topic
        if ping:
            await consumer.start()
            queue = (await consumer.queues_of("LoneSendSplit"))[0]

        async def one() -> None:
            if ping:
                await consumer.max_offset(queue)
            else:
                await producer.send(message)

        for _ in range(500):
            await one()
        os.kill(dev.process.pid, signal.SIGUSR1)
        await one()
        for _ in range(sends):
            await one()
        os.kill(dev.process.pid, signal.SIGUSR2)
        await one()
    finally:
        await consumer.close()
        await producer.close()


def pct(values: list[int], p: int) -> float:
    """The ``p``-th percentile of ``values`` (sorted) in µs."""
    return values[min(len(values) - 1, len(values) * p // 100)] / 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=5000)
    parser.add_argument("--ping", action="store_true", help="GET_MAX_OFFSET requests instead of sends")
    args = parser.parse_args(argv)
    with temp_root("lone-send-") as root:
        out = root / "split.json"
        dev_args = ["dev", "--host", "127.0.0.1", "--namesrv-port", "0", "--port", "0", "--flush", "async"]
        dev_args += ["--store-dir", str(root / "store")]
        dev = Service(dev_args, "dev namesrv ", env={"LONE_SEND_OUT": str(out)}, python_args=["-c", PRELUDE])
        try:
            run_loop(lone_sends(dev, dev.ready_line.split()[2], args.sends, args.ping), "uvloop")
        finally:
            dev.stop()
        walls, cpus, writes = json.loads(out.read_text())
    python = sorted(wall - write for wall, write in zip(walls, writes, strict=True))
    walls.sort()
    cpus.sort()
    writes.sort()
    print(f"{len(walls)} lone {'pings' if args.ping else 'sends'}, load {loadavg()}; per read, µs:")
    print("| | p10 | p50 | p90 |\n|---|---:|---:|---:|")
    for name, values in (
        ("data_received, wall", walls),
        ("  the answer's write (syscall)", writes),
        ("  the rest (Python, lanes, store)", python),
        ("data_received, thread CPU", cpus),
    ):
        print(f"| {name} | {pct(values, 10):.1f} | {pct(values, 50):.1f} | {pct(values, 90):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
