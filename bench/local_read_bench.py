"""Where a local read's CPU goes: copying records out of the CommitLog mapping against decoding them.

Run from the repo root::

    PYTHONPATH=$PWD .venv/bin/python bench/local_read_bench.py            # 1,000,000 messages, 4 rounds

The cluster and the input are ``bench/spark_source_bench.py``'s (a NameServer and broker, 1M messages
of 100 B in batches of 256 over 4 queues). One thread then reads every queue as a Spark task reads
it beside the broker (``connector/local_reads.py``: 4,096 records per read, the heads checked) and
decodes each body into the source's lean Arrow columns, timing the two apart with the thread's CPU
clock. The first half of the rounds map the segments afresh for each queue, as every range read
does; from the middle on each queue keeps one reader: its first round pays the page faults of
mapping the data as a fresh one does, the later ones read through pages already mapped (what the
faults cost is the difference).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_common import REPO, bench_root, loadavg, machine

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from spark_common import produce

from sparkmq.connector.arrow import records_to_arrow
from sparkmq.connector.columns import LEAN_COLUMNS
from sparkmq.connector.direct_pull import PullConnection
from sparkmq.connector.driver_view import driver_view_for
from sparkmq.connector.local_reads import LocalQueueReads, StoreFiles, store_files

TOPIC = "LocalReadBench"
SEGMENT_BYTES = 16 * 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=4, help="half with fresh mappings, half reusing them")
    args = parser.parse_args()
    from tests.support.processes import BrokerProcess, NamesrvProcess

    print(f"local read bench: {machine()}, load average {loadavg()}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="sparkmq-local-read-bench-", dir=bench_root()))
    segment = f"mapedFileSizeCommitLog={SEGMENT_BYTES}"
    try:
        with (
            NamesrvProcess.start() as namesrv,
            BrokerProcess.start(root / "store", namesrv.address, "--flush", "async", "--set", segment),
        ):
            asyncio.run(produce(namesrv.address, TOPIC, args.messages))
            view = driver_view_for(namesrv.address, "bench-local-read")
            queues = sorted(view.queues([TOPIC]), key=lambda q: q.queue_id)
            maxima = view.max_offsets(queues)
            asker = PullConnection(view.known_read_addresses(queues[0].broker_name)[0], None, timeout_s=10.0)
            files = store_files(asker)  # where the broker says its store is, as a read task asks
            asker.close()
            assert files is not None
            kept = [LocalQueueReads(files, TOPIC, q.queue_id) for q in queues]
            for round_ in range(args.rounds):
                reuse = round_ >= args.rounds // 2
                copy_s, decode_s, rows = read_all(files, [maxima[q] for q in queues], kept if reuse else None)
                print(
                    f"round {round_} ({'mappings reused' if reuse else 'fresh mappings'}): {rows:,} rows; copy out"
                    f" of the mapping + head checks {copy_s:.3f} CPU-s, lean decode {decode_s:.3f} CPU-s;"
                    f" load {loadavg()}",
                    flush=True,
                )
            for reads in kept:
                reads.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def read_all(files: StoreFiles, ends: list[int], kept: list[LocalQueueReads] | None) -> tuple[float, float, int]:
    """Every queue read whole (its own reader, or the ``kept`` one): copy s, decode s (thread CPU), rows."""
    copy_s = decode_s = 0.0
    rows = 0
    for queue_id, end in enumerate(ends):
        opened = contextlib.nullcontext(kept[queue_id]) if kept else LocalQueueReads(files, TOPIC, queue_id)
        with opened as reads:
            offset = 0
            while offset < end:
                began = time.thread_time()
                body, offset = reads.read(offset, min(4096, end - offset))
                copied = time.thread_time()
                assert body is not None
                batch = records_to_arrow(body, "broker", columns=LEAN_COLUMNS, topic=TOPIC)
                decode_s += time.thread_time() - copied
                copy_s += copied - began
                rows += batch.num_rows
                del body, batch
    return copy_s, decode_s, rows


if __name__ == "__main__":
    main()
