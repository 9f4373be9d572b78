"""The table writer's CPU per row, in-process: one Materializer cycle over a store of 100 B messages.

Run from the repo root::

    .venv/bin/python bench/table_cycle_bench.py            # 204,800 messages in 4 queues, 3 rounds

Messages carry a Java producer's properties (KEYS, TAGS, WAIT, UNIQ_KEY). Each round, in the same
process and store, writes the whole store to a new table once per variant: the C decode of the
lean columns + properties map (``leanrecords.c``) or the numpy reference, and the writer's Parquet
options (``WRITER_PROPERTIES``) or deltalake's defaults. CPU time (all threads of this process) per
row, so a shared machine's load shows less than in wall time. Results are in docs/tables.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

from bench_common import REPO, machine, print_machine, temp_root  # bench/ is sys.path[0]

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from deltalake import write_deltalake

import sparkmq.connector.arrow as arrow
import sparkmq.tables.materializer as materializer
from sparkmq.message import MessageBatch, encode_properties
from sparkmq.store import MessageStore
from sparkmq.store.config import StoreConfig
from sparkmq.tables.attributes import TableSettings
from sparkmq.tables.layout import RAW_COLUMNS
from sparkmq.tables.queue_rows import READ_MAX_COUNT, READER_GROUP

QUEUES, BATCH = 4, 256
VARIANTS = {  # name → (C decode, the writer's Parquet options)
    "C decode, WRITER_PROPERTIES": (True, materializer.WRITER_PROPERTIES),
    "C decode, deltalake defaults": (True, None),
    "numpy decode, WRITER_PROPERTIES": (False, materializer.WRITER_PROPERTIES),
}


def fill(store: MessageStore, count: int) -> None:
    prefix = os.urandom(8).hex().upper()
    for start in range(0, count, BATCH):
        props = [
            encode_properties({"KEYS": f"order-{i}", "TAGS": "TagA", "WAIT": "true", "UNIQ_KEY": f"{prefix}{i:016X}"})
            for i in range(start, start + BATCH)
        ]
        bodies = [os.urandom(100) for _ in range(BATCH)]
        batch = MessageBatch("T", (start // BATCH) % QUEUES, bodies, props, born_timestamp=1_700_000_000_000)
        if not store.put_messages(batch).ok:
            raise RuntimeError("the store refused a put")
    store.flush()


def cycle_cpu(store: MessageStore, root: str, count: int, native: bool, properties: object) -> float:
    """CPU µs per row of one cycle writing every message to a new table."""
    lean = arrow._leanrecords
    arrow._leanrecords = lean if native else None
    materializer.write_deltalake = functools.partial(write_deltalake, writer_properties=properties)
    try:
        settings = {"T": TableSettings(enabled=True)}
        writer = materializer.Materializer(store, "broker-a", root, 5.0, lambda: settings, max_rows=count)
        started = time.process_time()
        writer.cycle()
        spent = time.process_time() - started
        status = writer.statuses["T"]
        if status.state != materializer.OK or sum(q.table_offset for q in status.queues) != count:
            raise RuntimeError(f"the cycle did not write everything: {status}")
        return spent / count * 1e6
    finally:
        arrow._leanrecords = lean
        materializer.write_deltalake = write_deltalake


def decode_cpu(store: MessageStore, count: int, native: bool) -> float:
    """CPU µs per row of records_to_arrow alone (lean + properties, as the writer and includeProperties=true
    read), over the store's queues in reads of READ_MAX_COUNT."""
    bodies = []
    for queue_id in range(QUEUES):
        for offset in range(0, count // QUEUES, READ_MAX_COUNT):
            bodies.append(store.get_messages(READER_GROUP, "T", queue_id, offset, READ_MAX_COUNT).body())
    started = time.process_time()
    rows = sum(
        arrow.records_to_arrow(body, "broker-a", columns=RAW_COLUMNS, topic="T", native=native).num_rows
        for body in bodies
    )
    return (time.process_time() - started) / rows * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=204_800)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    info = machine()
    with temp_root("sparkmq-table-cycle-") as root:
        store = MessageStore(StoreConfig(root / "store"))
        store.start()
        try:
            fill(store, args.messages)
            cycle_cpu(store, str(root / "warm-up"), args.messages, True, None)
            figures: dict[str, list[float]] = {name: [] for name in VARIANTS}
            figures["decode only, C"], figures["decode only, numpy"] = [], []
            for round_ in range(args.rounds):
                figures["decode only, C"].append(decode_cpu(store, args.messages, True))
                figures["decode only, numpy"].append(decode_cpu(store, args.messages, False))
                for name, (native, properties) in VARIANTS.items():
                    table = str(root / f"t{round_}-{len(figures[name])}-{native}-{properties is None}")
                    figures[name].append(cycle_cpu(store, table, args.messages, native, properties))
        finally:
            store.close()
    print(
        f"one cycle over {args.messages:,} messages of 100 B ({QUEUES} queues), CPU µs per row, {args.rounds} rounds:"
    )
    for name, values in figures.items():
        print(f"  {name:34s} best {min(values):5.2f}   all {' '.join(f'{v:.2f}' for v in values)}")
    print_machine(info)


if __name__ == "__main__":
    main()
