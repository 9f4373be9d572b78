"""Writer process for test_crash_safety: append SYNC-flushed batches until SIGKILLed.

Usage: python crash_writer.py STORE_DIR SEED FIRST_SEQ [MAX_SECONDS]

Opens the store (recovering whatever the previous, killed, writer left), prints
``ready <last_exit_ok> <process_offset>``, then appends batch FIRST_SEQ, FIRST_SEQ+1, ...
(``store_checks.expected_batch``) and prints ``ack <queue> <first_queue_offset> <count> <seq>``
after each put returns PUT_OK, i.e. after its flush. After MAX_SECONDS (a guard against a
lost parent) it closes cleanly and prints ``closed``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sparkmq.store import MessageStore
from support.store_checks import crash_config, expected_batch


def main(argv: list[str]) -> int:
    root, seed, seq = Path(argv[1]), int(argv[2]), int(argv[3])
    deadline = time.monotonic() + (float(argv[4]) if len(argv) > 4 else 20.0)
    store = MessageStore(crash_config(root))
    report = store.start()
    print(f"ready {int(report.last_exit_ok)} {report.process_offset}", flush=True)
    while time.monotonic() < deadline:
        expected = expected_batch(seed, seq)
        result = store.put_messages(expected.batch())
        if not result.ok:
            print(f"put of batch {seq} failed: {result.status} {result.remark}", file=sys.stderr, flush=True)
            return 1
        print(f"ack {expected.queue_id} {result.queue_offset} {len(expected.bodies)} {seq}", flush=True)
        seq += 1
    store.close()
    print("closed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
