"""Store demo: order events through a real sparkmq store under the project, end to end.

Appends sample order events in batches (as a broker would on SEND_BATCH_MESSAGE), reads
every queue back through its ConsumeQueue, looks one order up by key, restarts the store
and checks everything is still there. It is the main job until the broker and Spark parts
land; ``make run`` runs it.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

from sparkmq.message import MessageBatch, decode_columns, encode_properties
from sparkmq.store import GetMessageStatus, MessageStore, StoreConfig

TOPIC = "orders"
QUEUES = 4
TAGS = ("books", "games", "music", "garden")


def order_batch(queue_id: int, first: int, count: int, rng: random.Random) -> MessageBatch:
    """``count`` JSON order events numbered from ``first``, keyed by order id, tagged by category."""
    bodies, props = [], []
    for number in range(first, first + count):
        tag = TAGS[number % len(TAGS)]
        order = {"order": number, "category": tag, "amount": round(rng.uniform(1, 200), 2)}
        bodies.append(json.dumps(order).encode())
        props.append(encode_properties({"TAGS": tag, "KEYS": f"order-{number}", "UNIQ_KEY": f"{number:032X}"}))
    return MessageBatch(TOPIC, queue_id, bodies, props, born_timestamp=int(time.time() * 1000))


def read_queue_bodies(store: MessageStore, queue_id: int) -> int:
    """Read a queue from offset 0 to its end in bulk; return the number of records."""
    offset, count = 0, 0
    while True:
        got = store.get_messages("demo", TOPIC, queue_id, offset, 4096, max_bytes=16 << 20)
        if got.status is not GetMessageStatus.FOUND:
            return count
        count += len(decode_columns(got.body()))
        offset = got.next_begin_offset


def run(store_dir: Path, messages: int, batch: int) -> int:
    """Write, read back, look up, restart, verify; print a summary; return an exit code."""
    rng = random.Random(7)
    config = StoreConfig(store_dir)
    with MessageStore(config) as store:
        base = sum(store.max_offset_in_queue(TOPIC, q) for q in range(QUEUES))
        started = time.perf_counter()
        for first in range(base, base + messages, batch):
            count = min(batch, base + messages - first)
            result = store.put_messages(order_batch(first // batch % QUEUES, first, count, rng))
            if not result.ok:
                print(f"put failed: {result.status.value} {result.remark}")
                return 1
        wrote_s = time.perf_counter() - started
        started = time.perf_counter()
        read = sum(read_queue_bodies(store, q) for q in range(QUEUES))
        read_s = time.perf_counter() - started
        found = store.query_messages(TOPIC, f"order-{base}", 1)
        print(f"wrote {messages:,} orders in {wrote_s:.2f} s ({messages / wrote_s:,.0f} msgs/s)")
        print(f"read  {read:,} records back in {read_s:.2f} s ({read / read_s:,.0f} msgs/s)")
        print(f"key lookup order-{base}: {bytes(found[0].body).decode() if found else 'NOT FOUND'}")
    with MessageStore(config) as reopened:
        after = sum(reopened.max_offset_in_queue(TOPIC, q) for q in range(QUEUES))
    print(f"after restart the store holds {after:,} orders in {QUEUES} queues under {store_dir}")
    ok = read == base + messages and after == base + messages and bool(found)
    print("store demo OK" if ok else "store demo FAILED")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store-dir", type=Path, default=Path("data/store-demo"))
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--fresh", action="store_true", help="delete the store directory first")
    args = parser.parse_args(argv)
    if args.fresh and args.store_dir.exists():
        shutil.rmtree(args.store_dir)
    return run(args.store_dir, args.messages, args.batch)


if __name__ == "__main__":
    raise SystemExit(main())
