"""What broker statistics and the Prometheus exporter cost per message (CPU time, not throughput).

Two measurements, because the machine is shared and wall-clock rates mean little there:

1. ``hot path``: ns per ``BrokerStats.put`` / ``BrokerStats.get`` call (what a send or pull
   request batch pays, always), timed over many calls in this process.
2. ``broker CPU``: a real ``python -m sparkmq dev`` process (NameServer + broker) receives
   ``--messages`` single sends and hands them to one pull consumer; its CPU time (utime+stime from
   /proc, 10 ms ticks) divided by the message count, with ``metricsExporterType`` DISABLE and PROM
   (scraped once a second while it runs), alternating ``--rounds`` times.

Run: ``python bench/metrics_bench.py --messages 3000 --rounds 2`` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import timeit
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_common import SMALL_STORE, Service, bench_root, free_port, loadavg, machine
from sparkmq.broker.stats import BrokerStats, timed
from sparkmq.client.message import Message
from sparkmq.client.producer import AsyncProducer
from sparkmq.client.pull_consumer import AsyncPullConsumer


def hot_path_ns(calls: int = 200_000, repeat: int = 5) -> dict[str, float]:
    """ns per call of what each request pays, best of ``repeat`` (the least disturbed by other load)."""
    stats = BrokerStats()

    async def processor(request: object, connection: object) -> object:
        return request

    class Answer:
        code = 0

    wrapped, answer = timed(processor, 310, stats), Answer()

    async def drive(serve: object, n: int) -> None:
        for _ in range(n):
            await serve(answer, None)

    loop = asyncio.new_event_loop()
    cases = {
        "BrokerStats.put": lambda: stats.put("orders", 1, 100),
        "BrokerStats.get": lambda: stats.get("billing", "orders", 32, 3200),
        "BrokerStats.rpc": lambda: stats.rpc(310, 0, 0.2),
    }
    result = {name: min(timeit.repeat(fn, number=calls, repeat=repeat)) / calls * 1e9 for name, fn in cases.items()}
    plain = min(timeit.repeat(lambda: loop.run_until_complete(drive(processor, 1000)), number=20, repeat=repeat))
    timed_run = min(timeit.repeat(lambda: loop.run_until_complete(drive(wrapped, 1000)), number=20, repeat=repeat))
    loop.close()
    result["timed() wrapper (extra per request)"] = (timed_run - plain) / 20_000 * 1e9
    return result


def start_dev(store: Path, metrics_port: int | None) -> Service:
    args = ["dev", "--store-dir", str(store), "--port", "0", "--namesrv-port", "0", *SMALL_STORE]
    if metrics_port is not None:
        args += ["--set", "metricsExporterType=PROM", "--set", "metricsPromExporterHost=127.0.0.1"]
        args += ["--set", f"metricsPromExporterPort={metrics_port}"]
    return Service(args, "dev namesrv")


async def drive(namesrv: str, messages: int) -> None:
    topic = "bench_metrics"
    async with AsyncProducer("PID_bench", namesrv) as producer:
        for i in range(messages):
            await producer.send(Message(topic, b"x" * 100, keys=str(i)))
    async with AsyncPullConsumer("CID_bench", namesrv) as consumer:
        queues = await consumer.queues_of(topic)
        await consumer.assign(queues)
        got = 0
        while got < messages:
            got += len(await consumer.poll(2.0, max_messages=256))
        await consumer.commit()


def scrape_loop(port: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            response.read()


def one_round(messages: int, prom: bool) -> float:
    """Broker-process CPU microseconds per message (send + pull) for one fresh store."""
    with tempfile.TemporaryDirectory(dir=bench_root()) as tmp:
        port = free_port() if prom else None
        dev = start_dev(Path(tmp) / "store", port)
        namesrv = dev.ready_line.split()[2]
        stop = threading.Event()
        try:
            asyncio.run(drive(namesrv, 200))  # warm-up: routes, topic creation, first segment
            scraper = threading.Thread(target=scrape_loop, args=(port, stop), daemon=True) if port else None
            if scraper:
                scraper.start()
            before = dev.cpu_seconds()
            asyncio.run(drive(namesrv, messages))
            used = dev.cpu_seconds() - before
        finally:
            stop.set()
            dev.stop()
    return used / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for key, value in machine().items():
        print(f"{key}: {value}")
    for name, ns in hot_path_ns().items():
        print(f"hot path: {name} {ns:.0f} ns/call")
    results: dict[str, list[float]] = {"DISABLE": [], "PROM": []}
    for _ in range(args.rounds):
        for mode in ("DISABLE", "PROM"):
            results[mode].append(one_round(args.messages, mode == "PROM"))
            print(f"  {mode:8} broker CPU {results[mode][-1]:.1f} us/message (load {loadavg()})", flush=True)
    for mode, values in results.items():
        print(
            f"metricsExporterType={mode}: median broker CPU {statistics.median(values):.1f} us/message "
            f"over {args.rounds} rounds of {args.messages} send+pull"
        )


if __name__ == "__main__":
    main()
