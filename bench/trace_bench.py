"""Message trace benchmark: what ``enable_msg_trace`` costs a producer's sends.

Run from the repo root::

    .venv/bin/python bench/trace_bench.py              # about 30 s
    .venv/bin/python bench/trace_bench.py --quick      # smoke run

A ``sparkmq dev`` subprocess (NameServer + broker, ASYNC flush, ``traceTopicEnable=true``, a temporary
store removed afterwards); one ``AsyncProducer`` without trace and one with ``enable_msg_trace=True``
send ``--sends`` messages of 100 B each, one at a time and then ``--inflight`` pipelined, rounds
alternating off / on. Reported per case: wall throughput of the sends, CPU per message of this client process
(getrusage: the traced producer's own sends, its Pub records, and its trace producer's sends) and of the
broker (its stores of the trace messages too), and what the dispatcher counted (trace messages sent,
dropped records). On a shared machine the CPU per message is the figure to compare; the figures are in
docs/clients.md, "Message trace".
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_common import REPO, Service, bench_root, loadavg, machine, own_cpu_seconds, send_bench_args, send_windowed

sys.path.insert(0, str(REPO))
from sparkmq.client.message import Message
from sparkmq.client.producer import AsyncProducer

TOPIC = "BenchTrace"


async def measure(producer: AsyncProducer, broker: Service, sends: int, width: int) -> tuple[float, float, float]:
    messages = [Message(TOPIC, os.urandom(100), keys=[f"k{i}"]) for i in range(sends)]
    broker_cpu, client_cpu, start = broker.cpu_seconds(), sum(own_cpu_seconds()), time.perf_counter()
    await send_windowed(producer.send, messages, width)
    wall = time.perf_counter() - start
    tracer = producer.tracer
    if tracer is not None:  # the trace records of these sends, sent too: part of the CPU cost
        while tracer.pending:
            await asyncio.sleep(0.01)
    return (
        sends / wall,
        (broker.cpu_seconds() - broker_cpu) / sends * 1e6,
        (sum(own_cpu_seconds()) - client_cpu) / sends * 1e6,
    )


def main() -> None:
    args = send_bench_args(__doc__)
    sends, rounds = (300, 1) if args.quick else (args.sends, args.rounds)
    print(" | ".join(f"{k}: {v}" for k, v in machine().items()))
    tmp = Path(tempfile.mkdtemp(prefix="trace-bench-", dir=bench_root()))
    dev = Service(
        ["dev", "--host", "127.0.0.1", "--namesrv-port", "0", "--port", "0", "--flush", "async",
         "--store-dir", str(tmp / "store"), "--set", "traceTopicEnable=true"],
        "dev namesrv ",
    )  # fmt: skip
    namesrv = dev.ready_line.split()[2]

    async def run() -> None:
        plain = AsyncProducer("PID_bench_plain", namesrv)
        traced = AsyncProducer("PID_bench_traced", namesrv, enable_msg_trace=True)
        for producer in (plain, traced):
            await producer.start()
            await producer.send(Message(TOPIC, b"warm"))  # route, connection, topic auto-creation
        try:
            print(f"\n## {sends} sends of 100 B per case, {rounds} round(s) alternating off / on")
            print(f"{'case':24} {'trace':5} {'msgs/s':>9} {'broker µs/msg':>14} {'client µs/msg':>14}")
            for round_number in range(rounds):
                for width in (1, args.inflight):
                    for producer in (plain, traced):
                        rate, broker_us, client_us = await measure(producer, dev, sends, width)
                        label = f"send, {width} in flight"
                        print(
                            f"{label:24} {'on' if producer.tracer else 'off':5} {rate:9.0f} {broker_us:14.1f} "
                            f"{client_us:14.1f}   (round {round_number + 1}, load {loadavg()})"
                        )
            assert traced.tracer is not None
            print(f"\ntrace messages sent: {traced.tracer.sent}, failed: {traced.tracer.failed}, "
                  f"records dropped: {traced.tracer.dropped}")  # fmt: skip
        finally:
            await plain.close()
            await traced.close()

    try:
        asyncio.run(run())
    finally:
        dev.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
