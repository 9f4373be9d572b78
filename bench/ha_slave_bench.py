"""The slave's cost per replicated run, alone: a sparkmq SLAVE fed by a scripted master over loopback.

This process plays the master of RocketMQ 4.x's HA wire (``sparkmq.broker.ha.wire``): it accepts the
slave's link, then sends the CommitLog of ``--messages`` Java-shaped single sends (128 B body, TAGS,
UNIQ_KEY, WAIT) in runs of ``--run`` records and waits for the slave's report of each run's end before
the next (lockstep: each run is one read, as at low load). Reported: the slave process's CPU per run
and per message (/proc, user + system) and the time from a run's send to its acknowledgement (p50 /
p99). CPU is the figure to compare on a shared machine.

Run: ``.venv/bin/python bench/ha_slave_bench.py [--run 1] [--messages 20000]``
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from bench_common import loadavg, machine, print_machine, process_cpu, temp_root  # noqa: E402
from sparkmq.broker.ha.wire import REPORT, encode_transfer_header  # noqa: E402
from sparkmq.message.properties import encode_properties  # noqa: E402
from sparkmq.message.record import MessageBatch  # noqa: E402
from sparkmq.store import MessageStore, StoreConfig  # noqa: E402
from sparkmq.store.replica import checked_records  # noqa: E402
from support.processes import BrokerProcess  # noqa: E402

TOPIC = "HaSingle"
SEGMENT_BYTES = 64 * 2**20  # both sides' mapedFileSizeCommitLog


def runs_of(root: Path, messages: int, per_run: int, body: int) -> list[tuple[int, bytes]]:
    """A master's CommitLog of ``messages`` single sends over 4 queues, cut into runs of ``per_run`` records."""
    store = MessageStore(StoreConfig(root / "master", commitlog_file_bytes=SEGMENT_BYTES))
    store.start()
    try:
        for i in range(messages):
            props = encode_properties({"TAGS": "T", "UNIQ_KEY": f"7F000001{i:024X}", "WAIT": "true"})
            store.put_messages(MessageBatch(TOPIC, i % 4, [b"x" * body], [props]))
        data = store.read_commitlog(0, store.commitlog.max_offset) or b""
        _whole, records = checked_records(data, 0, store.commitlog.file_bytes)
    finally:
        store.close()
    runs = []
    for first in range(0, len(records), per_run):
        chunk = records[first : first + per_run]
        start, end = chunk[0].physical_offset, chunk[-1].physical_offset + chunk[-1].size
        runs.append((start, data[start:end]))
    return runs


def read_report(link: socket.socket) -> int:
    data = b""
    while len(data) < REPORT.size:
        part = link.recv(REPORT.size - len(data))
        if not part:
            raise RuntimeError("the slave closed its HA link")
        data += part
    return int(REPORT.unpack(data)[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=int, default=1, help="records per replicated run")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--body", type=int, default=128)
    args = parser.parse_args()
    info = machine()
    with temp_root("ha-slave-bench-") as root, socket.create_server(("127.0.0.1", 0)) as server:
        runs = runs_of(root, args.messages, args.run, args.body)
        flags = {
            "brokerRole": "SLAVE",
            "brokerId": "1",
            "haListenPort": "0",
            "mapedFileSizeCommitLog": str(SEGMENT_BYTES),
        }
        flags["haMasterAddress"] = f"127.0.0.1:{server.getsockname()[1]}"
        settings = [f for key, value in flags.items() for f in ("--set", f"{key}={value}")]
        with BrokerProcess.start(root / "slave", None, *settings) as slave:
            server.settimeout(60)
            link, _ = server.accept()
            with link:
                link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                link.settimeout(60)
                if read_report(link) != 0:
                    raise RuntimeError("the slave's store is not empty")
                warm = len(runs) // 10
                acks: list[float] = []
                for n, (offset, data) in enumerate(runs):
                    if n == warm:
                        cpu = sum(process_cpu(slave.pid))
                        started = time.perf_counter()
                    sent = time.perf_counter()
                    link.sendall(encode_transfer_header(offset, len(data)) + data)
                    while read_report(link) < offset + len(data):  # heartbeats report the same end
                        pass
                    if n >= warm:
                        acks.append(time.perf_counter() - sent)
                elapsed = time.perf_counter() - started
                used = sum(process_cpu(slave.pid)) - cpu
    print_machine(info)
    measured = len(acks)
    messages = measured * args.run
    acks.sort()
    print(
        f"runs of {args.run}: {measured:,} runs in {elapsed:.2f} s; slave CPU {used / measured * 1e6:.1f} us/run, "
        f"{used / messages * 1e6:.1f} us/msg; ack p50 {statistics.median(acks) * 1e6:.0f} us, "
        f"p99 {acks[int(len(acks) * 0.99)] * 1e6:.0f} us; load {loadavg()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
