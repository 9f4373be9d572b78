"""A Spark read task's pulls without Spark: ``source.read_ranges`` of a trigger's partitions in threads.

Run from the repo root::

    PYTHONPATH=$PWD .venv/bin/python bench/pull_range_bench.py                 # ~30 s
    PYTHONPATH=$PWD .venv/bin/python bench/pull_range_bench.py --no-decode     # bodies only
    PYTHONPATH=$PWD .venv/bin/python bench/pull_range_bench.py --local-reads   # from the store's files

The cluster and the input are ``bench/spark_source_bench.py``'s (a namesrv + broker pair, 1M
messages of 100 B over 4 queues); each "trigger" is 250,000 records planned as the source plans
them with ``maxPartitions`` 2 (two tasks of two queue ranges), and each task runs in its own
thread of this process as a Spark task runs in its own worker (the decode in C releases the GIL,
the socket waits too). Each round (a fresh consumer group, the whole topic) prints the median
trigger wall, the median time from a task's start to its first batch, the broker's CPU µs per
pull (user / system, ``/proc``) and this process's CPU seconds. Round 0 pays the process's first
reads; compare the broker's CPU per pull across code, interleaved: a shared machine moves the wall.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_common import REPO, bench_root, loadavg, machine, process_cpu

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from spark_common import QUEUES, produce

from sparkmq.connector.driver_view import DriverView, driver_view_for
from sparkmq.connector.options import SourceOptions
from sparkmq.source import pack_ranges, plan_ranges, read_ranges, with_addresses

TOPIC = "PullRangeBench"


def run_trigger(
    options: SourceOptions,
    group: str,
    start: int,
    per_queue: int,
    ends: list[int],
    decode: bool,
    consume_s: float,
    planned: DriverView | None,
) -> tuple[float, list[float]]:
    """One trigger's two tasks in two threads: (wall s, each task's first-batch delay s)."""
    begin = {TOPIC: {f"{_BROKER[0]}:{q}": min(start, ends[q]) for q in range(QUEUES)}}
    end = {TOPIC: {f"{_BROKER[0]}:{q}": min(start + per_queue, ends[q]) for q in range(QUEUES)}}
    ranges = plan_ranges(_offsets(begin), _offsets(end), None)
    parts = pack_ranges(with_addresses(ranges, planned) if planned is not None else ranges, 2, None)
    firsts: list[float] = [0.0] * len(parts)

    def task(index: int) -> None:
        began = time.perf_counter()
        rows = 0
        for batch in read_ranges(options, group, parts[index]) if decode else _bodies(options, group, parts[index]):
            if not firsts[index]:
                firsts[index] = time.perf_counter() - began
            rows += batch if isinstance(batch, int) else batch.num_rows
            if consume_s:
                time.sleep(consume_s)  # Spark's task writing the batch to the JVM (blocked on its socket)
        assert rows == sum(p.size for p in parts[index].ranges) or not decode, rows

    started = time.perf_counter()
    threads = [threading.Thread(target=task, args=(i,)) for i in range(len(parts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, firsts


def _bodies(options: SourceOptions, group: str, partition: object) -> object:
    from sparkmq.connector.broker_view import view_for

    view = view_for(options.namesrv_addr, group, options.security)
    for part in partition.ranges:  # type: ignore[attr-defined]
        for _body in view.read_range(part.queue, part.start, part.end, options.pull_batch_size):
            yield 1


def _offsets(table: dict[str, dict[str, int]]) -> object:
    from sparkmq.connector.offsets import from_json_offsets

    return from_json_offsets(table)


_BROKER: list[str] = []


def _ms(seconds: list[float]) -> str:
    return ", ".join(f"{x * 1000:.1f}" for x in seconds)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--per-trigger", type=int, default=250_000)
    parser.add_argument("--rounds", type=int, default=3, help="passes over the whole topic (fresh group each)")
    parser.add_argument("--no-decode", action="store_true", help="count bodies, no Arrow decode")
    parser.add_argument(
        "--consume-ms",
        type=float,
        default=0.0,
        help="wait this long after each batch, as a Spark task hands it to the JVM (~3-5 ms per 4096 rows)",
    )
    parser.add_argument(
        "--commitlog-mib",
        type=int,
        default=16,
        help="CommitLog segment size (default 16, the test harness's and spark benches'; RocketMQ's is 1024)",
    )
    parser.add_argument(
        "--unplanned",
        action="store_true",
        help="partitions without the driver's broker addresses: each group's first read starts a client (the old path)",
    )
    parser.add_argument(
        "--local-reads",
        action="store_true",
        help="read the broker's store files (the source's default beside the broker; off: pulls over sockets)",
    )
    args = parser.parse_args()
    from tests.support.processes import BrokerProcess, NamesrvProcess

    print(f"pull range bench: {machine()}, load average {loadavg()}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="sparkmq-pull-range-bench-", dir=bench_root()))
    namesrv = NamesrvProcess.start()
    segment = f"mapedFileSizeCommitLog={args.commitlog_mib * 1024 * 1024}"
    broker = BrokerProcess.start(root / "store", namesrv.address, "--flush", "async", "--set", segment)
    print(f"broker pid {broker.process.pid}", flush=True)
    try:
        asyncio.run(produce(namesrv.address, TOPIC, args.messages))
        from sparkmq.connector.broker_view import view_for

        options = SourceOptions.parse(
            {"namesrvAddr": namesrv.address, "topic": TOPIC, "consumerGroup": "g0"}
            | {"localReads": str(args.local_reads).lower()}
        )
        queues = view_for(namesrv.address, "bench-routes").queues([TOPIC], None)
        _BROKER.append(queues[0].broker_name)
        maxima = view_for(namesrv.address, "bench-routes").max_offsets(queues)
        ends = [maxima[q] for q in sorted(queues, key=lambda q: q.queue_id)]
        per_queue = args.per_trigger // QUEUES
        pulls = sum(-(-(end - start) // options.pull_batch_size) for end in ends for start in range(0, end, per_queue))
        planned = None
        if not args.unplanned:
            planned = driver_view_for(namesrv.address, "bench-driver")
            planned.queues([TOPIC])  # as the driver's latestOffset: the route, fetched once per trigger there
        for round_ in range(args.rounds):
            group = f"bench-{round_}"
            walls, firsts, opening = [], [], []
            user, system = process_cpu(broker.process.pid)
            mine = _own_cpu()
            for start in range(0, max(ends), per_queue):
                wall, first = run_trigger(
                    options, group, start, per_queue, ends, not args.no_decode, args.consume_ms / 1000, planned
                )
                walls.append(wall)
                firsts.extend(first)
                opening = opening or first  # the round's first trigger: a new group's first reads
            user_after, system_after = process_cpu(broker.process.pid)
            user_us, system_us = (user_after - user) * 1e6 / pulls, (system_after - system) * 1e6 / pulls
            print(
                f"round {round_}: trigger wall s median {statistics.median(walls):.3f} [{min(walls):.3f}-"
                f"{max(walls):.3f}]; first batch ms median {statistics.median(firsts) * 1000:.1f} [max"
                f" {max(firsts) * 1000:.1f}; first trigger's {_ms(opening)}]; broker CPU µs per pull"
                f" {user_us + system_us:.0f} (user"
                f" {user_us:.0f} / system {system_us:.0f}); this process CPU s {_own_cpu() - mine:.2f};"
                f" load {loadavg()}",
                flush=True,
            )
    finally:
        from sparkmq.connector.broker_view import close_views

        close_views()
        broker.stop()
        namesrv.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
