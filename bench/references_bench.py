"""The official Java client 4.9.7 against Apache RocketMQ 4.9.7 and sparkmq, in one run, same machine.

Both clusters run at once (same broker.conf keys, the flush type chosen here); each case runs against
Apache, then sparkmq, with a fresh client JVM (references/runner/ClientBench.java):

- send single / send batch: sync sends of BODY-byte messages from THREADS threads for SECONDS
  (batch: 32 messages a request), SEND_OK counted;
- pull: DefaultMQPullConsumer reads every queue of the batch topic from offset 0, 32 a pull;
- push: DefaultMQPushConsumer consumes the single-send topic from its first offset;
- latency: one message at a time (sync send), time from before the send until the push consumer has it,
  p50/p99 over COUNT messages;
- RSS: the broker process's VmRSS at rest (after start-up) and its peak while the cases ran.

Before the cases each broker takes WARMUP seconds of unmeasured single sends (the JVM's JIT warms up).

Needs `make references`. Run: ``.venv/bin/python bench/references_bench.py [--flush SYNC_FLUSH] [--seconds 10]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from bench_common import machine, print_machine, temp_root  # noqa: E402
from support.reference_pair import SIDES, broker_pair  # noqa: E402
from support.rocketmq_java import MAKE_TARGET, classpath, client_jvm, missing_references  # noqa: E402

BATCH = 32


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


def client(namesrv: str, log_dir: Path, *args: object) -> dict[str, Any]:
    """One ClientBench run; its JSON line."""
    log_dir.mkdir(parents=True, exist_ok=True)
    command = ["java", *client_jvm(log_dir), "-cp", classpath("runner", "rocketmq"), "ClientBench", namesrv]
    done = subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=600, cwd=log_dir)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"ClientBench {args} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return lines[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flush", choices=("SYNC_FLUSH", "ASYNC_FLUSH"), default="ASYNC_FLUSH")
    parser.add_argument("--seconds", type=int, default=10, help="each send case's duration")
    parser.add_argument("--threads", type=int, default=8, help="sending threads (batch sends: a quarter)")
    parser.add_argument("--body", type=int, default=128, help="message body bytes")
    parser.add_argument("--latency-count", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=10, help="seconds of unmeasured sends per broker first (the JIT)")
    args = parser.parse_args()
    missing = missing_references("rocketmq", "runner")
    if missing:
        print(f"{missing} is missing: run `{MAKE_TARGET}`", file=sys.stderr)
        return 2
    info = machine()
    results: dict[str, dict[str, Any]] = {side: {} for side in SIDES}
    with temp_root("references-bench-") as root, broker_pair(root, {"flushDiskType": args.flush}) as pair:
        for side in SIDES:
            results[side]["rss_rest"] = rss_mb(pair.broker_pids[side])
        with PeakRss(pair.broker_pids) as peak:
            for side in SIDES:
                client(
                    pair.namesrvs[side],
                    root / f"client-{side}",
                    "send",
                    "BenchWarm",
                    args.threads,
                    args.warmup,
                    args.body,
                    1,
                )
            cases = [
                ("send single", ("send", "BenchSingle", args.threads, args.seconds, args.body, 1)),
                ("send batch", ("send", "BenchBatch", max(1, args.threads // 4), args.seconds, args.body, BATCH)),
            ]
            for name, case in cases:
                for side in SIDES:
                    results[side][name] = client(pair.namesrvs[side], root / f"client-{side}", *case)
            for side in SIDES:
                batch_sent = results[side]["send batch"]["sent"] + 1  # + the message that fetched the route
                results[side]["pull"] = client(
                    pair.namesrvs[side], root / f"client-{side}", "pull", "BenchBatch", batch_sent
                )
            for side in SIDES:
                single_sent = results[side]["send single"]["sent"] + 1
                results[side]["push"] = client(
                    pair.namesrvs[side], root / f"client-{side}", "push", "BenchSingle", "bench_push_cg", single_sent
                )
            for side in SIDES:
                results[side]["latency"] = client(
                    pair.namesrvs[side],
                    root / f"client-{side}",
                    "latency",
                    "BenchLatency",
                    args.latency_count,
                    args.body,
                )
        for side in SIDES:
            results[side]["rss_peak"] = peak.peak[side]
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

    def row_ms(case: str, apache: float, ours: float, target: str) -> None:
        lines.append(f"| {case} | {apache:.2f} ms | {ours:.2f} ms | {ours / apache:.2f}x | {target} |")

    for case in ("send single", "send batch", "pull", "push"):
        row(f"{case} (msgs/s)", a[case]["msgs_per_s"], s[case]["msgs_per_s"], "", ">= 1.0x")
    row_ms("end-to-end latency p50", a["latency"]["p50_ms"], s["latency"]["p50_ms"], "")
    row_ms("end-to-end latency p99", a["latency"]["p99_ms"], s["latency"]["p99_ms"], "<= 1.0x")
    row("broker RSS at rest", a["rss_rest"], s["rss_rest"], "MB", "<= 1.0x")
    row("broker RSS, peak under load", a["rss_peak"], s["rss_peak"], "MB", "<= 1.0x")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
