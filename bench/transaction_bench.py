"""Transactional messages: producer round trips and the broker's check-back scan.

    PYTHONPATH=. python bench/transaction_bench.py --count 500 --halves 5000

1. ``send_in_transaction`` (half send + local callback + oneway END) against ``Producer.send``,
   through an EmbeddedCluster (broker and client share this process and its GIL).
2. One check-back round over ``--halves`` undecided half messages (each is re-appended and a
   CHECK_TRANSACTION_STATE prepared; no producer is connected, so none is sent): ms per round.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bench_common import bench_root, machine
from sparkmq import LocalTransactionState, Message, Producer, TransactionProducer
from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.controller import BrokerController
from sparkmq.broker.transactions.state import half_message
from sparkmq.embedded import EmbeddedCluster
from sparkmq.message.properties import encode_properties
from sparkmq.message.record import MessageBatch


def producer_rates(count: int, root: Path) -> dict[str, float]:
    with EmbeddedCluster(root / "e2e") as cluster:
        ns = cluster.namesrv_address
        rates = {}
        with Producer("PID_bench_plain", ns) as plain:
            plain.send(Message("BenchTx", b"warm-up"))
            started = time.perf_counter()
            for _i in range(count):
                plain.send(Message("BenchTx", b"x" * 100))
            rates["plain send/s"] = count / (time.perf_counter() - started)
        commit = LocalTransactionState.COMMIT
        with TransactionProducer(
            "PID_bench_tx", ns, execute_local=lambda m, a: commit, check_local=lambda m: commit
        ) as tx:
            tx.send_in_transaction(Message("BenchTx", b"warm-up"))
            started = time.perf_counter()
            for _i in range(count):
                tx.send_in_transaction(Message("BenchTx", b"x" * 100))
            rates["send_in_transaction/s"] = count / (time.perf_counter() - started)
    return rates


async def scan_round(halves: int, root: Path) -> float:
    config = BrokerConfig(
        listen_port=0, store_path_root_dir=root / "scan", transaction_check_interval=3_600_000, transaction_time_out=0
    )
    async with BrokerController(config) as broker:
        assert broker.store is not None and broker.transactions is not None
        props = encode_properties({"TAGS": "t", "UNIQ_KEY": "", "PGROUP": "PID_bench"})
        for i in range(halves):
            item = MessageBatch(
                "BenchTx",
                0,
                [b"x" * 100],
                [props.replace(b"UNIQ_KEY\x01", f"UNIQ_KEY\x01K{i}".encode())],
                born_timestamp=1,
            )
            broker.store.submit_messages(half_message(item, "PID_bench"))
        started = time.perf_counter()
        asked = await broker.transactions.checker.check_once()
        elapsed = time.perf_counter() - started
        assert asked == halves, asked
        return elapsed * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--halves", type=int, default=5000)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(dir=bench_root()) as tmp:
        for name, rate in producer_rates(args.count, Path(tmp)).items():
            print(f"{name}: {rate:,.0f} ({args.count} messages of 100 B)")
        ms = asyncio.run(scan_round(args.halves, Path(tmp)))
        print(
            f"check-back round over {args.halves} undecided half messages: {ms:,.0f} ms "
            f"({ms * 1000 / args.halves:,.0f} µs each)"
        )


if __name__ == "__main__":
    main()
