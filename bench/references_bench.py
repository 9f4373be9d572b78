"""The official Java client 4.9.7 against Apache RocketMQ 4.9.7 and sparkmq, in one run, same machine.

Both clusters run at once (same broker.conf keys, the flush type chosen here); each case runs against
Apache, then sparkmq, with a fresh client JVM (references/runner/ClientBench.java):

- send single / send batch: sync sends of BODY-byte messages from THREADS threads for SECONDS
  (batch: 32 messages a request), SEND_OK counted; send async: IN_FLIGHT async sends unanswered at a time;
- pull: DefaultMQPullConsumer reads every queue of the batch topic from offset 0, 32 a pull;
- push: DefaultMQPushConsumer consumes the single-send topic from its first offset;
- latency: one message at a time (sync send), time from before the send until the push consumer has it,
  p50/p99 over COUNT messages;
- RSS: the broker process's VmRSS at rest (after start-up) and its peak while the cases ran;
- C++ client (PyPI ``rocketmq`` 0.4.4, tests/interop/cpp_client.py): ``send_sync`` single, ``send_batch``
  of 32, PullConsumer and PushConsumer of the single sends; msgs/s between its first and last per-message line
  (Apache 4.9.7 stores a C++ batch as one message: docs/compatibility.md);
- ``--cases ha``: SYNC_MASTER + SLAVE of each (Apache's slave finds its master through the NameServer),
  Java client single sync sends; ``--cases recovery``: kill -9 with ``--recovery-gb`` in the CommitLog
  (bench/references_store.py).

Before the cases each broker takes WARMUP seconds of unmeasured single sends (the JVM's JIT warms up).

Needs `make references`. Run: ``.venv/bin/python bench/references_bench.py [--flush SYNC_FLUSH] [--seconds 10]
[--cases java cpp ha recovery]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from references_store import client, ha_throughput, recovery  # noqa: E402

from bench_common import machine, print_machine, temp_root  # noqa: E402
from support.reference_pair import SIDES, BrokerPair, broker_pair  # noqa: E402
from support.rocketmq_cpp import DRIVER, require_cpp_python  # noqa: E402
from support.rocketmq_java import MAKE_TARGET, missing_references  # noqa: E402

BATCH = 32
CASES = ("java", "cpp", "ha", "recovery")
THROUGHPUT_CASES = (
    *("send single", "send batch", "send async", "pull", "push"),
    *("cpp send single", "cpp send batch", "cpp pull", "cpp push", "ha send single"),
)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class PeakRss:
    """The highest VmRSS of some processes, sampled every 100 ms while running."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.peak = {side: 0.0 for side in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            for side, pid in self.pids.items():
                self.peak[side] = max(self.peak[side], rss_mb(pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def cpp(namesrv: str, home: Path, command: str, *args: object, timeout_s: float = 300.0) -> dict[str, Any]:
    """One cpp_client.py run; msgs/s between the arrival of its first and its last per-message line."""
    python = require_cpp_python()
    home.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    argv = [str(python), str(DRIVER), command, "--namesrv", namesrv, *map(str, args)]
    arrivals: list[tuple[float, int]] = []  # (time, messages the line stands for)
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=home) as run:
        assert run.stdout is not None
        deadline = threading.Timer(timeout_s, run.kill)
        deadline.start()
        for line in run.stdout:
            record = json.loads(line) if line.startswith("{") else {}
            if record.get("event") == "sent" and record["status"] == 0 or record.get("event") == "received":
                arrivals.append((time.perf_counter(), int(record.get("size", 1))))
        deadline.cancel()
    if len(arrivals) < 2:
        raise RuntimeError(f"cpp_client.py {command} {args}: {len(arrivals)} messages (rc {run.returncode})")
    messages = sum(count for _, count in arrivals[1:])
    seconds = arrivals[-1][0] - arrivals[0][0]
    return {"messages": messages + arrivals[0][1], "seconds": seconds, "msgs_per_s": messages / seconds}


def java_cases(pair: BrokerPair, root: Path, args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    """The Java client's cases, each against Apache then sparkmq, after WARMUP seconds of sends each."""

    def each(name: str, *case: object) -> None:
        for side in SIDES:
            results[side][name] = client(pair.namesrvs[side], root / f"client-{side}", *case)

    for side in SIDES:
        client(
            pair.namesrvs[side], root / f"client-{side}", "send", "BenchWarm", args.threads, args.warmup, args.body, 1
        )
    each("send single", "send", "BenchSingle", args.threads, args.seconds, args.body, 1)
    each("send batch", "send", "BenchBatch", max(1, args.threads // 4), args.seconds, args.body, BATCH)
    each("send async", "async", "BenchAsync", args.in_flight, args.seconds, args.body)
    for side in SIDES:
        batch_sent = results[side]["send batch"]["sent"] + 1  # + the message that fetched the route
        results[side]["pull"] = client(pair.namesrvs[side], root / f"client-{side}", "pull", "BenchBatch", batch_sent)
    for side in SIDES:
        single_sent = results[side]["send single"]["sent"] + 1
        results[side]["push"] = client(
            pair.namesrvs[side], root / f"client-{side}", "push", "BenchSingle", "bench_push_cg", single_sent
        )
    each("latency", "latency", "BenchLatency", args.latency_count, args.body)


def cpp_cases(pair: BrokerPair, root: Path, args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    """The C++ client's cases, each against Apache then sparkmq (one sending thread: the wrapper's sync API)."""
    batches = max(1, args.cpp_count // BATCH)
    cases = [
        ("cpp send single", "produce", "CppSingle", "--group", "cpp_pg", "--count", args.cpp_count),
        ("cpp send batch", "produce-batch", "CppBatch", "--group", "cpp_pg", "--batches", batches, "--size", BATCH),
        ("cpp pull", "pull-consume", "CppSingle", "--group", "cpp_pull_cg", "--count", args.cpp_count),
        ("cpp push", "push-consume", "CppSingle", "--group", "cpp_push_cg", "--count", args.cpp_count),
    ]
    for name, command, topic, *rest in cases:
        for side in SIDES:
            home = root / f"cpp-{side}"
            pad = ("--pad", args.body) if command.startswith("produce") else ()
            results[side][name] = cpp(pair.namesrvs[side], home, command, "--topic", topic, *rest, *pad)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flush", choices=("SYNC_FLUSH", "ASYNC_FLUSH"), default="ASYNC_FLUSH")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--seconds", type=int, default=10, help="each send case's duration")
    parser.add_argument("--threads", type=int, default=8, help="sending threads (batch sends: a quarter)")
    parser.add_argument("--in-flight", type=int, default=64, help="async sends unanswered at a time")
    parser.add_argument("--body", type=int, default=128, help="message body bytes")
    parser.add_argument("--latency-count", type=int, default=1000)
    parser.add_argument("--cpp-count", type=int, default=20_000, help="C++ client messages per case")
    parser.add_argument("--recovery-gb", type=float, default=1.0, help="CommitLog GiB before the kill -9")
    parser.add_argument("--warmup", type=int, default=10, help="seconds of unmeasured sends per broker first (the JIT)")
    args = parser.parse_args()
    missing = missing_references("rocketmq", "runner")
    if missing:
        print(f"{missing} is missing: run `{MAKE_TARGET}`", file=sys.stderr)
        return 2
    info = machine()
    results: dict[str, dict[str, Any]] = {side: {} for side in SIDES}
    with temp_root("references-bench-") as root:
        if {"java", "cpp"} & set(args.cases):
            with broker_pair(root / "pair", {"flushDiskType": args.flush}) as pair:
                for side in SIDES:
                    results[side]["rss_rest"] = rss_mb(pair.broker_pids[side])
                with PeakRss(pair.broker_pids) as peak:
                    if "java" in args.cases:
                        java_cases(pair, root, args, results)
                    if "cpp" in args.cases:
                        cpp_cases(pair, root, args, results)
                for side in SIDES:
                    results[side]["rss_peak"] = peak.peak[side]
        if "ha" in args.cases:
            for side, figure in ha_throughput(root / "ha", args.flush, args.threads, args.seconds, args.body).items():
                results[side]["ha send single"] = figure
        if "recovery" in args.cases:
            for side, figure in recovery(root / "recovery", args.flush, args.recovery_gb).items():
                results[side]["recovery"] = figure
    print_machine(info)
    print(f"flush {args.flush}, body {args.body} B, {args.threads} send threads, {args.seconds} s per send case")
    print(json.dumps(results))
    print(table(results))
    return 0


def table(results: dict[str, dict[str, Any]]) -> str:
    a, s = results["apache"], results["sparkmq"]
    lines = ["| case | Apache RocketMQ 4.9.7 | sparkmq | sparkmq / Apache | target |", "|---|---:|---:|---:|---|"]

    def row(case: str, apache: float, ours: float, unit: str, target: str) -> None:
        lines.append(f"| {case} | {apache:,.0f} {unit} | {ours:,.0f} {unit} | {ours / apache:.2f}x | {target} |")

    def row_ms(case: str, apache: float, ours: float, target: str, unit: str = "ms") -> None:
        lines.append(f"| {case} | {apache:.2f} {unit} | {ours:.2f} {unit} | {ours / apache:.2f}x | {target} |")

    for case in THROUGHPUT_CASES:
        if case in a:
            row(f"{case} (msgs/s)", a[case]["msgs_per_s"], s[case]["msgs_per_s"], "", ">= 1.0x")
    if "latency" in a:
        row_ms("end-to-end latency p50", a["latency"]["p50_ms"], s["latency"]["p50_ms"], "")
        row_ms("end-to-end latency p99", a["latency"]["p99_ms"], s["latency"]["p99_ms"], "<= 1.0x")
    if "rss_rest" in a:
        row("broker RSS at rest", a["rss_rest"], s["rss_rest"], "MB", "<= 1.0x")
        row("broker RSS, peak under load", a["rss_peak"], s["rss_peak"], "MB", "<= 1.0x")
    if "recovery" in a:
        for key, name in (("ready_s", "restart after kill -9: ready"), ("first_ok_s", "... first send + pull")):
            row_ms(name, a["recovery"][key], s["recovery"][key], "<= 1.0x", "s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
