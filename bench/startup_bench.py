"""Start-up benchmark: how long a big store takes to start, clean and after kill -9, and a retention pass.

Run from the repo root::

    .venv/bin/python bench/startup_bench.py                      # 10M messages, 16 queues
    .venv/bin/python bench/startup_bench.py --messages 200000    # smoke run
    .venv/bin/python bench/startup_bench.py --machine-crash      # also the machine-crash path (slow)

It builds the store with bulk ``put_messages`` of 4,096 small messages (16-byte bodies, no
properties, so no index entries; ``--keys``: a UNIQ_KEY each) round-robin over 16 queues, ASYNC flush, production file
sizes (1 GiB CommitLog segments, 300,000-unit ConsumeQueue files), closes it, then times:

* ``clean``: ``MessageStore.start()`` after a clean close;
* ``kill -9``: a writer process starts the store, puts for 0.5, 1 or 1.5 s and is SIGKILLed
  mid-put; the next ``start()`` recovers (the abort marker names this boot);
* ``machine crash`` (``--machine-crash``): the same with the abort marker emptied, as after
  a power loss: RocketMQ's replay of the checkpoint's safe segment;
* ``retention``: one forced pass that deletes the oldest segment and cleans every queue.

The store lives in a temporary directory on the repository's disk and is removed at the end
(``--keep DIR`` builds it there once and reuses it). Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import REPO, bench_root, machine  # noqa: E402 - bench/ is sys.path[0]

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sparkmq.message.properties import encode_properties
from sparkmq.message.record import MessageBatch
from sparkmq.store import MessageStore, StoreConfig

TOPIC = "StartupT"
QUEUES = 16
BATCH = 4096
BODY = b"0123456789abcdef"


def config(root: Path) -> StoreConfig:
    """Production sizes, ASYNC flush, retention only when asked."""
    return StoreConfig(root, delete_when="", disk_max_used_space_ratio=1.0)


def batch(queue_id: int, keys: bool) -> MessageBatch:
    """4,096 messages for one queue; with ``keys`` each has a UNIQ_KEY (an IndexFile entry)."""
    props = (
        [encode_properties({"UNIQ_KEY": f"{queue_id:08X}{i:024X}"}) for i in range(BATCH)] if keys else [b""] * BATCH
    )
    return MessageBatch(TOPIC, queue_id, [BODY] * BATCH, props, born_timestamp=1_700_000_000_000)


def build(root: Path, messages: int, keys: bool) -> float:
    """Fill a fresh store with ``messages`` messages; return the seconds it took."""
    batches = [batch(q, keys) for q in range(QUEUES)]
    began = time.perf_counter()
    with MessageStore(config(root)) as store:
        for number in range(-(-messages // BATCH)):
            result = store.put_messages(batches[number % QUEUES])
            assert result.ok, result
    return time.perf_counter() - began


def timed_start(root: Path) -> tuple[float, str]:
    """Seconds of ``start()`` and what recovery reported."""
    store = MessageStore(config(root))
    began = time.perf_counter()
    report = store.start()
    seconds = time.perf_counter() - began
    total = sum(store.max_offset_in_queue(TOPIC, q) for q in range(QUEUES))
    store.close()
    return seconds, f"{report}; {total:,} messages in queues"


def writer(root: Path, keys: bool) -> None:
    """The process that gets killed: start, say so, put until killed."""
    store = MessageStore(config(root))
    store.start()
    batches = [batch(q, keys) for q in range(QUEUES)]
    print("ready", flush=True)
    number = 0
    while True:
        store.put_messages(batches[number % QUEUES])
        number += 1


def kill_writer(root: Path, seconds: float, keys: bool) -> None:
    """Run ``writer`` in a child, SIGKILL it ``seconds`` after it is ready (mid-put)."""
    command = [sys.executable, __file__, "--writer", str(root)] + (["--keys"] if keys else [])
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip() == "ready", line
    time.sleep(seconds)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()


def retention_pass(root: Path) -> tuple[float, str]:
    with MessageStore(config(root)) as store:
        began = time.perf_counter()
        report = store.retention.run(force=True)
        seconds = time.perf_counter() - began
        mins = {store.min_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
    return seconds, f"{report}; queue minimums now {sorted(mins)[:3]}..."


def disk_usage(root: Path) -> str:
    allocated = sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())
    return f"{allocated / 2**30:.2f} GiB allocated"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--keep", type=Path, help="build the store here once and reuse it")
    parser.add_argument("--machine-crash", action="store_true")
    parser.add_argument("--keys", action="store_true", help="give every message a UNIQ_KEY (IndexFile entries)")
    parser.add_argument("--writer", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writer:
        writer(args.writer, args.keys)
        return 0
    print(machine())
    parent = Path(tempfile.mkdtemp(prefix="startup-bench-", dir=bench_root()))
    root = args.keep or parent / "store"
    try:
        if not (root / "commitlog").exists():
            seconds = build(root, args.messages, args.keys)
            print(f"build: {args.messages:,} messages in {seconds:.1f} s; {disk_usage(root)}")
        for case in ("clean", "clean (again)"):
            seconds, note = timed_start(root)
            print(f"start {case}: {seconds:.3f} s  [{note}]")
        for delay in (0.5, 1.0, 1.5):
            kill_writer(root, delay, args.keys)
            seconds, note = timed_start(root)
            print(f"start after kill -9 mid-put ({delay} s of puts): {seconds:.3f} s  [{note}]")
        if args.machine_crash:
            kill_writer(root, 1.0, args.keys)
            (root / "abort").write_text("")  # as if the machine had restarted
            seconds, note = timed_start(root)
            print(f"start after a machine crash: {seconds:.3f} s  [{note}]")
        seconds, note = retention_pass(root)
        print(f"retention pass (deletes the oldest segment): {seconds:.3f} s  [{note}]")
        seconds, note = timed_start(root)
        print(f"start after retention: {seconds:.3f} s  [{note}]")
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main(sys.argv[1:]))
