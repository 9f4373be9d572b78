"""Failover chaos: SIGKILL of the master of a controller-mode group, round after round.

A NameServer with the controller embedded and three ``sparkmq broker`` processes in controller
mode (SYNC_MASTER, SYNC flush, ``allAckInSyncStateSet=true``, ``controllerHeartBeatTimeoutMills``
2000). A sparkmq producer sends numbered messages without pause from a thread. Each round waits
until every broker is in the SyncStateSet, SIGKILLs the master, measures the time from the kill
to the producer's first SEND_OK after it (failover time), and restarts the killed broker on its
store (it rejoins as a replica, truncating what it held that the group did not). At the end
every acknowledged message must be readable, and the three CommitLogs byte-identical over the
master's whole length.

    .venv/bin/python bench/failover_bench.py --rounds 20 [--cpp] [--controllers 3]

``--controllers 3`` runs three standalone controller nodes replicating through Raft
(``controllerDLegerPeers``) beside a plain NameServer instead, and each round SIGKILLs the
controller leader together with the broker master (and restarts it with the broker).

``--cpp`` also runs the real C++ producer (``tests/interop/cpp_client.py produce-through``, needs
``.venv-rocketmq``: ``make venv``) through the same rounds and records its failover times; a round
then also waits for the C++ producer's first SEND_OK after the kill.

Prints one JSON line per round and a summary (median and max failover time); exits 1 if an
acknowledged message is lost or the CommitLogs differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

import sparkmq
from bench_common import bench_root, machine
from support.controller_group import ControllerGroup, commitlog_bytes
from support.processes import wait_until
from support.rocketmq_cpp import CppClientRun

TOPIC = "FailoverTopic"
CPP_TOPIC = "FailoverCppTopic"
UNTIL_S = 120.0
RETRY_PAUSE_S = 0.005  # between failed sends while no master answers


class Sender(threading.Thread):
    """Sends ``seq N`` messages back to back; records which were acknowledged and when."""

    def __init__(self, namesrv: str) -> None:
        super().__init__(daemon=True)
        self.namesrv = namesrv
        self.acknowledged: list[int] = []
        self.last_ok = (0.0, 0.0)  # (when the newest acknowledged send started, when it was answered)
        self.failures = 0
        self.errors: dict[str, int] = {}  # failures by exception type and the start of its remark
        self.stop = threading.Event()
        self.ok = threading.Condition()

    def run(self) -> None:
        seq = 0
        with sparkmq.Producer("PID_FAILOVER", self.namesrv, send_timeout_s=3.0) as producer:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    producer.send(sparkmq.Message(TOPIC, b"seq %d" % seq))
                except sparkmq.SparkmqError as exc:
                    self.failures += 1
                    kind = f"{type(exc).__name__}: {exc.remark[:60]}"
                    self.errors[kind] = self.errors.get(kind, 0) + 1
                    time.sleep(RETRY_PAUSE_S)
                    continue
                with self.ok:
                    self.acknowledged.append(seq)
                    self.last_ok = (started, time.monotonic())
                    self.ok.notify_all()
                seq += 1

    def first_ok_after(self, moment: float, timeout_s: float) -> float | None:
        """When the first send that started after ``moment`` was acknowledged (one in flight at the kill
        may have been answered before it)."""
        with self.ok:
            if self.ok.wait_for(lambda: self.last_ok[0] > moment, timeout_s):
                return self.last_ok[1]
        return None


def seq_index(body: bytes) -> int:
    return int(body.split()[1])


def cpp_index(body: bytes) -> int:
    return int(body.split(b"-body-")[1])


def cpp_first_ok_after(cpp: CppClientRun, killed_at_wall: float) -> float:
    """Seconds from the kill to the SEND_OK of the C++ producer's first send started after it."""
    cpp.wait_for(
        lambda run: any(r["status"] == 0 and r["started"] > killed_at_wall for r in run.events("sent")),
        UNTIL_S,
        "a C++ send acknowledged after the kill",
    )
    after = [r["at"] for r in cpp.events("sent") if r["status"] == 0 and r["started"] > killed_at_wall]
    return min(after) - killed_at_wall


def read_back(
    namesrv: str, wanted: set[int], topic: str = TOPIC, index: Callable[[bytes], int] = seq_index
) -> set[int]:
    """Read the topic from the start until every index of ``wanted`` arrived (or the deadline):
    unacknowledged sends may be stored too, so a count would stop too early."""
    got: set[int] = set()
    with sparkmq.PullConsumer("CID_FAILOVER", namesrv) as consumer:
        queues = consumer.queues_of(topic)
        consumer.assign(queues)
        for queue in queues:
            consumer.seek(queue, 0)
        deadline = time.monotonic() + UNTIL_S
        while not wanted <= got and time.monotonic() < deadline:
            got.update(index(m.body) for m in consumer.poll(0.5))
    return got


def explain(group: ControllerGroup) -> None:
    """A slow round: the last lines of every process, on stderr."""
    assert group.namesrv is not None
    nodes = [] if group.nodes is None else [(f"controller {i}", n.output) for i, n in enumerate(group.nodes.nodes) if n]
    for name, lines in [("namesrv", group.namesrv.output), *nodes] + [
        (f"broker {i}", b.output) for i, b in enumerate(group.brokers) if b is not None
    ]:
        sys.stderr.write(f"--- {name}\n" + "\n".join(lines[-40:]) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cpp", action="store_true", help="the real C++ producer sends too")
    parser.add_argument("--controllers", type=int, default=1, choices=(1, 3), help="controller nodes (3: Raft)")
    parser.add_argument("--explain-over", type=float, default=5.0, help="log tails of a round slower than this (s)")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "rounds": args.rounds, "controllers": args.controllers}), flush=True)
    times: list[float] = []
    with (
        tempfile.TemporaryDirectory(dir=bench_root()) as tmp,
        ControllerGroup(Path(tmp), 3, controllers=args.controllers) as group,
    ):
        assert group.namesrv is not None
        if not wait_until(group.all_in_sync, UNTIL_S):
            raise SystemExit("the group never had a master with every replica in sync")
        sender = Sender(group.namesrv.address)
        sender.start()
        cpp = cpp_times = None
        if args.cpp:
            cpp_times = []
            cpp = CppClientRun.start(
                Path(tmp) / "home", "produce-through", "--namesrv", group.namesrv.address, "--topic", CPP_TOPIC,
                "--group", "PID_FAILOVER_CPP", "--count", "100000000", "--deadline", "100000",
            )  # fmt: skip
        for number in range(args.rounds):
            if not wait_until(group.all_in_sync, UNTIL_S, interval_s=0.05):
                raise SystemExit(f"round {number}: the group did not get back in sync")
            master = group.master_index()
            assert master is not None
            leader = None if group.nodes is None else group.nodes.leader()
            killed_at = time.monotonic()
            group.kill(master)
            if group.nodes is not None and leader is not None:
                group.nodes.kill(leader)
            first_ok = sender.first_ok_after(killed_at, UNTIL_S)
            if first_ok is None:
                raise SystemExit(f"round {number}: no send succeeded within {UNTIL_S} s of the kill")
            times.append(first_ok - killed_at)
            if cpp is not None and cpp_times is not None:
                cpp_times.append(cpp_first_ok_after(cpp, time.time() - (time.monotonic() - killed_at)))
            new_master = group.master_index()
            if times[-1] > args.explain_over:
                explain(group)
            print(json.dumps({"round": number, "failover_s": round(times[-1], 3), "master": new_master}), flush=True)
            group.start_broker(master)
            if group.nodes is not None and leader is not None:
                group.nodes.start_node(leader)
                if not wait_until(lambda: group.nodes is not None and group.nodes.leader() is not None, UNTIL_S):
                    raise SystemExit(f"round {number}: the controllers did not agree on a leader again")
        sender.stop.set()
        sender.join()
        cpp_lost = None
        if cpp is not None:
            cpp.kill()
            cpp_acked = {r["index"] for r in cpp.events("sent") if r["status"] == 0}
            cpp_got = read_back(group.namesrv.address, cpp_acked, CPP_TOPIC, cpp_index)
            cpp_lost = sorted(cpp_acked - cpp_got)
        if not wait_until(group.all_in_sync, UNTIL_S):
            raise SystemExit("the group did not get back in sync at the end")
        acknowledged = set(sender.acknowledged)
        got = read_back(group.namesrv.address, acknowledged)
        lost = sorted(acknowledged - got)
        master = group.master_index()
        assert master is not None
        end = group.max_offset(master)
        logs = {commitlog_bytes(group.store_dir(i), end) for i in group.live()}
        identical = len(logs) == 1 and len(next(iter(logs))) == end
    summary = {
        "failovers": len(times),
        "failover_median_s": round(statistics.median(times), 3),
        "failover_max_s": round(max(times), 3),
        "failover_min_s": round(min(times), 3),
        "acknowledged": len(acknowledged),
        "failed_sends": sender.failures,
        "failures_by_kind": dict(sorted(sender.errors.items(), key=lambda kv: -kv[1])[:5]),
        "lost": len(lost),
        "lost_indexes": lost[:10],
        "commitlog_bytes_compared": end,
        "commitlogs_identical": identical,
    }
    if cpp_times:
        summary |= {
            "cpp_failover_median_s": round(statistics.median(cpp_times), 3),
            "cpp_failover_max_s": round(max(cpp_times), 3),
            "cpp_acknowledged": len(cpp_acked),
            "cpp_lost": len(cpp_lost or ()),
            "cpp_lost_indexes": (cpp_lost or [])[:10],
        }
    print(json.dumps({"summary": summary}), flush=True)
    return 0 if not lost and not cpp_lost and identical else 1


if __name__ == "__main__":
    sys.exit(main())
