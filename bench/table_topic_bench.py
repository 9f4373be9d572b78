"""Topics as tables under load: 100 B batch sends at full speed to a table-enabled topic.

Run from the repo root::

    .venv/bin/python bench/table_topic_bench.py             # 20 s of sends, tableTopicCommitIntervalMs=5000
    .venv/bin/python bench/table_topic_bench.py --quick     # 5 s, 1000 ms interval

A real broker process (``tableTopicRoot`` in a temporary directory, removed afterwards) takes
SEND_BATCH_MESSAGE requests of 256 messages of 100 random bytes (Java producer properties), 8 in
flight, on one connection, for ``--seconds``: first to a plain topic (the send rate without a
table, same run), then to a table-enabled one. Meanwhile ``SPARKMQ_TABLE_STATUS`` is polled every
0.25 s. Reported: the send rate; the materialized rate (rows in the table from the first send until
the table holds everything, over that time); the worst lag during the sends, in seconds and in
commit intervals; how long the table took to catch up once the sends stopped. Results are in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from broker_bench import batch_plan

# bench/ is sys.path[0]
from bench_common import REPO, SMALL_STORE, Service, cpu_seconds, machine, print_machine, temp_root

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.table_bodies import TableStatusBody
from sparkmq.remoting import RemotingClient

TOPIC, PLAIN_TOPIC, QUEUES, BATCH, INFLIGHT = "table_bench", "plain_bench", 4, 256, 8
POLL_S = 0.25
TIMEOUT_S = 30.0


@dataclass
class Run:
    sent: int = 0
    send_seconds: float = 0.0
    worst_lag_s: float = 0.0
    worst_lag_messages: int = 0
    done_seconds: float = 0.0  # first send → the table holds every message
    threads: Counter[str] = field(default_factory=Counter)  # the broker's CPU seconds by thread kind, this run
    cpu_seconds: float = 0.0  # the broker's, all threads (those ended too)


def thread_cpu(pid: int) -> Counter[str]:
    """CPU seconds (user + system) of each of ``pid``'s threads so far, summed by name, digits dropped."""
    tick, found = os.sysconf("SC_CLK_TCK"), Counter[str]()
    for task in os.scandir(f"/proc/{pid}/task"):
        try:
            with open(f"{task.path}/stat") as stat:
                text = stat.read()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        name = re.sub(r"[-_]?\d+$", "", text[text.index("(") + 1 : text.rindex(")")])
        fields = text[text.rindex(")") + 2 :].split()
        found[name] += (int(fields[11]) + int(fields[12])) / tick
    return found


async def _status(client: RemotingClient, address: str) -> TableStatusBody:
    response = await client.invoke(address, RequestCode.SPARKMQ_TABLE_STATUS, {"topic": TOPIC}, timeout=TIMEOUT_S)
    if response.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"tableStatus failed: {response.remark}")
    return TableStatusBody.decode(response.body)


async def bench(address: str, pid: int, seconds: float) -> tuple[Run, Run]:
    """The same sends to a plain topic, then to a table-enabled one: (plain, table)."""
    client = RemotingClient()
    try:
        runs = []
        for topic in (PLAIN_TOPIC, TOPIC):
            before, cpu = thread_cpu(pid), cpu_seconds(pid)
            run = await _sends(client, address, topic, seconds)
            run.threads, run.cpu_seconds = thread_cpu(pid) - before, cpu_seconds(pid) - cpu
            runs.append(run)
        return runs[0], runs[1]
    finally:
        await client.close()


async def _sends(client: RemotingClient, address: str, topic: str, seconds: float) -> Run:
    run = Run()
    table = topic == TOPIC
    fields = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": str(QUEUES),
        "writeQueueNums": str(QUEUES),
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    if table:
        fields["attributes"] = "+table.enable=true"
    created = await client.invoke(address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields, timeout=TIMEOUT_S)
    assert created.code == ResponseCode.SUCCESS, created.remark
    plan = batch_plan(topic, 64 * BATCH, BATCH)  # reused round-robin: built before the clock starts
    sending = True
    started = time.perf_counter()

    async def sender(worker: int) -> None:
        index = worker
        while sending:
            request, body = plan[index % len(plan)]
            response = await client.invoke(address, RequestCode.SEND_BATCH_MESSAGE, request, body, TIMEOUT_S)
            if response.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send failed: {response.code} {response.remark}")
            run.sent += BATCH
            index += INFLIGHT

    async def watch() -> None:
        while sending and table:
            status = await _status(client, address)
            run.worst_lag_s = max([run.worst_lag_s] + [q.lag_seconds for q in status.queues])
            run.worst_lag_messages = max(run.worst_lag_messages, sum(q.lag_messages for q in status.queues))
            await asyncio.sleep(POLL_S)

    tasks = [asyncio.create_task(sender(w)) for w in range(INFLIGHT)] + [asyncio.create_task(watch())]
    await asyncio.sleep(seconds)
    sending = False
    await asyncio.gather(*tasks)
    run.send_seconds = time.perf_counter() - started
    while table:
        status = await _status(client, address)
        if status.state == "stalled":
            raise RuntimeError(f"the table stalled: {status.reason}")
        if sum(q.table_offset for q in status.queues) >= run.sent:
            break
        await asyncio.sleep(0.05)
    run.done_seconds = time.perf_counter() - started
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval-ms", type=int, default=5000, help="tableTopicCommitIntervalMs")
    parser.add_argument("--quick", action="store_true", help="5 s of sends, a 1000 ms interval")
    args = parser.parse_args(argv)
    seconds, interval_ms = (5.0, 1000) if args.quick else (args.seconds, args.interval_ms)
    info = machine()
    with temp_root("table-bench") as root:
        settings = ["--set", f"tableTopicRoot={root / 'tables'}", "--set", f"tableTopicCommitIntervalMs={interval_ms}"]
        store = ["--store-dir", str(root / "store"), *SMALL_STORE]
        broker = Service(["broker", "--host", "127.0.0.1", "--port", "0", *store, *settings], "broker listening on ")
        try:
            plain, run = asyncio.run(bench(broker.address, broker.process.pid, seconds))
        finally:
            broker.stop()
    interval_s = interval_ms / 1000
    print(f"sends: messages of 100 B in batches of {BATCH}, {INFLIGHT} in flight, {run.send_seconds:.1f} s per topic")
    print(f"  send rate, plain     {plain.sent / plain.send_seconds:12,.0f} msgs/s (the same broker, no table)")
    print(f"  send rate, table     {run.sent / run.send_seconds:12,.0f} msgs/s")
    print(f"  materialized rate    {run.sent / run.done_seconds:12,.0f} msgs/s (first send → table complete)")
    print(f"  worst lag            {run.worst_lag_s:12.2f} s = {run.worst_lag_s / interval_s:.2f} commit intervals")
    print(f"  worst lag            {run.worst_lag_messages:12,} messages")
    print(f"  caught up after      {run.done_seconds - run.send_seconds:12.2f} s once the sends stopped")
    print("  the broker's CPU by thread, µs per message: plain / table (first send → table complete)")
    for name in sorted(plain.threads | run.threads, key=lambda n: -run.threads[n]):
        if max(plain.threads[name], run.threads[name]) >= 0.05:
            per = plain.threads[name] / plain.sent * 1e6, run.threads[name] / run.sent * 1e6
            print(f"    {name:<24} {per[0]:6.2f} / {per[1]:6.2f}")
    print(f"    {'all':<24} {plain.cpu_seconds / plain.sent * 1e6:6.2f} / {run.cpu_seconds / run.sent * 1e6:6.2f}")
    print_machine(info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
