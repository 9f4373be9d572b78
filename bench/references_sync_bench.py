"""SYNC flush: disk syncs per request of the Java client's batch sends, Apache RocketMQ 4.9.7 against sparkmq.

Both brokers with ``flushDiskType=SYNC_FLUSH`` (bench/references_bench.py's pair); ROUNDS rounds, the order of
the sides alternating, of THREADS threads sending batches of 32 BODY-byte messages for SECONDS, each with
``strace -c -f`` on the broker counting its ``fdatasync``, ``msync`` and ``fsync`` calls: disk syncs per
request (one per request: no sharing) and msgs/s (strace slows both brokers). On a shared disk the rates
swing; the sync counts are what a change to the group commit moves.

Needs `make references` and strace. Run: ``.venv/bin/python bench/references_sync_bench.py [--rounds 4]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from references_bench import BATCH  # noqa: E402
from references_store import client  # noqa: E402

from bench_common import machine, print_machine, temp_root  # noqa: E402
from support.reference_pair import SIDES, broker_pair  # noqa: E402

SYNC_CALLS = ("fdatasync", "msync", "fsync")


def traced_syncs(summary: str) -> int:
    """The disk sync calls of an ``strace -c`` summary."""
    rows = (line.split() for line in summary.splitlines())
    return sum(int(row[3]) for row in rows if len(row) >= 5 and row[-1] in SYNC_CALLS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--body", type=int, default=128)
    args = parser.parse_args()
    if shutil.which("strace") is None:
        sys.exit("strace is missing")
    info = machine()
    with (
        temp_root("references-sync-bench-") as root,
        broker_pair(root / "pair", {"flushDiskType": "SYNC_FLUSH"}) as pair,
    ):
        for side in SIDES:
            client(pair.namesrvs[side], root / f"client-{side}", "send", "BenchWarm", 8, 5, args.body, 1)
        for number in range(args.rounds):
            for side in SIDES if number % 2 == 0 else SIDES[::-1]:
                summary = root / f"strace-{side}-{number}.txt"
                command = ["strace", "-c", "-f", "-e", f"trace={','.join(SYNC_CALLS)}", "-o", str(summary)]
                tracer = subprocess.Popen([*command, "-p", str(pair.broker_pids[side])], stderr=subprocess.DEVNULL)
                time.sleep(0.5)  # strace attaches to every thread before the sends start
                case = ("send", "BenchBatch", args.threads, args.seconds, args.body, BATCH)
                result = client(pair.namesrvs[side], root / f"client-{side}", *case)
                tracer.send_signal(signal.SIGINT)
                tracer.wait()
                requests = result["sent"] / BATCH
                syncs = traced_syncs(summary.read_text())
                print(
                    f"round {number} {side:8s} {result['msgs_per_s']:9,.0f} msgs/s, {syncs / requests:.3f} disk "
                    f"syncs a request ({syncs:,} for {requests:,.0f}), load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    print_machine(info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
