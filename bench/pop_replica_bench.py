"""What replicating the POP state costs: pop + ack over remoting, a lone broker against a controller group.

Each round starts a lone ``sparkmq broker`` (SYNC flush: a POP change waits for the journal's fsync)
and a controller-mode group of two (SYNC_MASTER, SYNC flush, ``allAckInSyncStateSet=true``: a POP
change also waits for its revive log record to be flushed and held by the replica), one after the
other. Against each: COUNT sequential sends (the same wait a send has), then one client pops
(batches of up to 8) and acks each message, one request at a time. Prints one JSON line per run and
the same-run ratios (group / lone) of the pop + ack rate and of the send rate.

    .venv/bin/python bench/pop_replica_bench.py --count 600 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from bench_common import bench_root, machine
from sparkmq import Message, Producer
from sparkmq.message.record import iter_records
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.pop_headers import AckMessageRequestHeader, PopMessageRequestHeader
from sparkmq.remoting import RemotingClient
from support.controller_group import GROUP, UNTIL_S, ControllerGroup
from support.processes import BrokerProcess, NamesrvProcess, wait_until

TOPIC, CONSUMER = "PopReplicaBench", "CID_POP_REPLICA_BENCH"


async def pop_and_ack(address: str, broker_name: str, count: int) -> tuple[float, list[float]]:
    """Seconds to pop and ack ``count`` messages, and each ack's latency."""
    client = RemotingClient()
    got, acks = 0, []
    start = time.perf_counter()
    try:
        while got < count:
            born = int(time.time() * 1000)
            header = PopMessageRequestHeader(CONSUMER, TOPIC, -1, 8, 60_000, 1000, born, 0, "TAG", "*")
            answer = await client.invoke(address, RequestCode.POP_MESSAGE, header.to_fields(), b"", 10)
            if answer.code != ResponseCode.SUCCESS:
                continue
            f = answer.ext_fields
            for m in iter_records(answer.body):
                info = f"{m.queue_offset} {f['popTime']} {f['invisibleTime']} 0 0 {broker_name} {m.queue_id}"
                fields = AckMessageRequestHeader(CONSUMER, TOPIC, m.queue_id, info, m.queue_offset).to_fields()
                t0 = time.perf_counter()
                acked = await client.invoke(address, RequestCode.ACK_MESSAGE, fields, b"", 10)
                acks.append(time.perf_counter() - t0)
                if acked.code != ResponseCode.SUCCESS:
                    raise SystemExit(f"ack refused: {acked.code} {acked.remark}")
                got += 1
    finally:
        await client.close()
    return time.perf_counter() - start, acks


def run(kind: str, namesrv: str, address: str, broker_name: str, count: int) -> dict[str, float]:
    with Producer("PID_POP_REPLICA_BENCH", namesrv) as producer:
        producer.send(Message(TOPIC, b"warm"))
        start = time.perf_counter()
        for _ in range(count - 1):
            producer.send(Message(TOPIC, b"x" * 100))
        sends = (count - 1) / (time.perf_counter() - start)
    elapsed, acks = asyncio.run(pop_and_ack(address, broker_name, count))
    acks.sort()
    result = {
        "sends_per_s": round(sends),
        "pop_ack_per_s": round(count / elapsed),
        "ack_median_ms": round(statistics.median(acks) * 1000, 2),
        "ack_p99_ms": round(acks[int(len(acks) * 0.99)] * 1000, 2),
    }
    print(json.dumps({"kind": kind} | result), flush=True)
    return result


def lone(root: Path, count: int) -> dict[str, float]:
    namesrv = NamesrvProcess.start()
    broker = BrokerProcess.start(root / "lone", namesrv.address, "--set", "flushDiskType=SYNC_FLUSH")
    try:
        return run("lone", namesrv.address, broker.address, "broker-a", count)
    finally:
        broker.stop()
        namesrv.stop()


def group_of_two(root: Path, count: int) -> dict[str, float]:
    with ControllerGroup(root / "group", 2) as group:
        if not wait_until(group.all_in_sync, UNTIL_S):
            raise SystemExit("the group never had both brokers in sync")
        assert group.namesrv is not None
        master = group.brokers[group.master_index() or 0]
        assert master is not None
        return run("group", group.namesrv.address, master.address, GROUP, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "count": args.count, "rounds": args.rounds}), flush=True)
    ratios: dict[str, list[float]] = {"pop_ack": [], "sends": []}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(dir=bench_root()) as tmp:
            a, b = lone(Path(tmp), args.count), group_of_two(Path(tmp), args.count)
        ratios["pop_ack"].append(b["pop_ack_per_s"] / a["pop_ack_per_s"])
        ratios["sends"].append(b["sends_per_s"] / a["sends_per_s"])
    summary = {f"group_over_lone_{k}_median": round(statistics.median(v), 2) for k, v in ratios.items()}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
