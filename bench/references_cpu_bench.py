"""The broker's CPU per message under the official Java client's batch sends and pulls (sparkmq alone).

The same ClientBench cases as bench/references_bench.py's "send batch" (THREADS threads of sync sends of
32 BODY-byte messages) and "pull" (every queue from offset 0, 32 a pull), against one sparkmq broker: its
CPU seconds from /proc around each case, per message. On a shared machine these move less than the
rates do.

Needs `make references`. Run: ``.venv/bin/python bench/references_cpu_bench.py [--flush SYNC_FLUSH]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from references_bench import BATCH, client  # noqa: E402

from bench_common import loadavg, machine, print_machine, process_cpu, temp_root  # noqa: E402
from support.processes import BrokerProcess, NamesrvProcess  # noqa: E402
from support.rocketmq_java import COMMON_BROKER_CONF, MAKE_TARGET, missing_references  # noqa: E402


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flush", choices=("SYNC_FLUSH", "ASYNC_FLUSH"), default="ASYNC_FLUSH")
    parser.add_argument("--seconds", type=int, default=8, help="the batch send case's duration")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--body", type=int, default=128)
    return parser.parse_args()


def main() -> int:
    args = arguments()
    if missing := missing_references("rocketmq", "runner"):
        sys.exit(f"{missing} is missing: run `{MAKE_TARGET}`")
    info = machine()
    flags = [f for k, v in {**COMMON_BROKER_CONF, "flushDiskType": args.flush}.items() for f in ("--set", f"{k}={v}")]
    with (
        temp_root("references-cpu-bench-") as root,
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(root / "store", namesrv.address, *flags) as broker,
    ):
        client(namesrv.address, root / "client", "send", "BenchWarm", args.threads, 3, args.body, 1)
        cases = [("send batch", ("send", "BenchBatch", args.threads, args.seconds, args.body, BATCH))]
        sent = 0
        for name, case in [*cases, ("pull", ())]:
            if name == "pull":
                case = ("pull", "BenchBatch", sent + 1)  # + the message that fetched the route
            before = sum(process_cpu(broker.pid))
            result = client(namesrv.address, root / "client", *case)
            cpu = sum(process_cpu(broker.pid)) - before
            messages = result.get("sent") or result["got"]
            sent = result.get("sent", sent)
            print(
                f"{name}: {messages:,} messages, {result['msgs_per_s']:,.0f} msgs/s, broker {cpu:.2f} CPU-s = "
                f"{cpu / messages * 1e6:.2f} µs a message (load {loadavg()})"
            )
    print_machine(info)
    print(f"flush {args.flush}, body {args.body} B, {args.threads} send threads, batches of {BATCH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
