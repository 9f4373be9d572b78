"""Crash loop: the real C++ client sends under SYNC flush while the broker is SIGKILLed, round after round.

Each round starts ``sparkmq broker`` (SYNC flush, 1 MiB CommitLog segments, the same store
directory every round), starts a producer of the real RocketMQ C++ client (PyPI rocketmq
0.4.4, ``tests/interop/cpp_client.py produce``) that sends one message per request, and
SIGKILLs the broker at a random moment; every fourth round kills the broker during its own
start-up (recovery) instead. Every ``--verify-every`` rounds, and at the end, a broker is
started on the store and every message the C++ client was told SEND_OK must be there,
byte-equal, read back with sparkmq's PullConsumer.

    .venv/bin/python bench/crash_loop_bench.py --rounds 100

Prints one JSON line per verification and a summary; exits 1 if an acknowledged message is lost.
Needs ``.venv-rocketmq`` (``make venv``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

import sparkmq
from bench_common import bench_root, free_port, machine
from support.processes import BrokerProcess, NamesrvProcess
from support.rocketmq_cpp import CppClientRun

TOPIC = "CrashLoopTopic"
SEND_OK = 0
BROKER_FLAGS = (
    "--flush",
    "sync",
    "--set",
    "mapedFileSizeCommitLog=1048576",
    "--set",
    "mapedFileSizeConsumeQueue=6000",
    "--set",
    "brokerName=crash-broker",
)


def start_broker(store: Path, namesrv: str, port: int, flags: tuple[str, ...] = BROKER_FLAGS) -> BrokerProcess:
    """Start the broker, retrying while the killed one's port lingers."""
    for attempt in range(20):
        try:
            return BrokerProcess.start(store, namesrv, *flags, port=port)
        except RuntimeError:
            if attempt == 19:
                raise
            time.sleep(0.25)
    raise AssertionError("unreachable")


def acked_bodies(run: CppClientRun, prefix: str, pad: int) -> set[str]:
    """The bodies (as cpp_client.py builds them) of the sends answered SEND_OK."""
    return {
        f"{prefix}-body-{record['index']}" + "." * pad
        for record in run.events("sent")
        if record.get("status") == SEND_OK
    }


def stored_bodies(namesrv: str) -> list[str]:
    """Every body of the topic, read from each queue's minimum to its maximum."""
    bodies: list[str] = []
    with sparkmq.PullConsumer("crash-loop-verifier", namesrv) as consumer:
        queues = consumer.queues_of(TOPIC)
        for queue in queues:
            offset, end = consumer.min_offset(queue), consumer.max_offset(queue)
            while offset < end:
                result = consumer.pull_raw(queue, offset, 256)
                if not result.found:
                    raise AssertionError(f"pull of {queue} at {offset} (max {end}) answered {result.status!r}")
                for message in sparkmq.client.message.decode_pull_body(result.body, queue.broker_name):
                    bodies.append(message.body.decode())
                offset = result.next_begin_offset
    return bodies


def verify(store: Path, namesrv: str, port: int, acked: set[str]) -> dict[str, int]:
    started = time.monotonic()
    broker = start_broker(store, namesrv, port)
    start_s = time.monotonic() - started
    try:
        bodies = stored_bodies(namesrv)
    finally:
        broker.stop()
    present = set(bodies)
    lost = sorted(acked - present)
    return {
        "acked": len(acked),
        "stored": len(bodies),
        "lost": len(lost),
        "duplicates": len(bodies) - len(present),
        "verify_start_ms": round(start_s * 1000),
        "lost_sample": [body[:40] for body in lost[:5]],
    }


def run_round(number: int, rng: random.Random, store: Path, namesrv: str, port: int, home: Path) -> set[str]:
    """One round; returns the bodies acknowledged SEND_OK in it."""
    if number % 4 == 3:  # kill during start-up / recovery
        proc = _spawn_broker(store, namesrv, port)
        time.sleep(rng.uniform(0.1, 1.5))
        proc.kill()
        proc.wait()
        return set()
    broker = start_broker(store, namesrv, port)
    prefix, pad = f"r{number}", rng.choice((0, 50, 500))
    producer = CppClientRun.start(
        home,
        "produce",
        "--namesrv",
        namesrv,
        "--topic",
        TOPIC,
        "--group",
        "PID_CRASH_LOOP",
        "--count",
        "1000000",
        "--prefix",
        prefix,
        "--pad",
        str(pad),
    )
    try:
        producer.wait_for(lambda run: bool(run.events("sent")), 60.0, "the first acknowledged send")
        time.sleep(rng.uniform(0.2, 2.0))
    finally:
        broker.kill()
        time.sleep(0.2)  # let in-flight acknowledgements reach the producer's stdout before it dies
        producer.kill()
    return acked_bodies(producer, prefix, pad)


def _spawn_broker(store: Path, namesrv: str, port: int) -> subprocess.Popen[bytes]:
    """A broker process nobody waits for (it is killed during its start-up)."""
    args = [
        sys.executable,
        "-m",
        "sparkmq",
        "broker",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--store-dir",
        str(store),
        "--namesrv",
        namesrv,
        *BROKER_FLAGS,
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--verify-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(json.dumps({"machine": machine(), "rounds": args.rounds}))
    acked: set[str] = set()
    lost_total = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=bench_root()) as tmp, NamesrvProcess.start() as namesrv:
        store, home, port = Path(tmp) / "store", Path(tmp) / "home", free_port()
        for number in range(args.rounds):
            acked |= run_round(number, rng, store, namesrv.address, port, home)
            if (number + 1) % args.verify_every == 0 or number == args.rounds - 1:
                result = verify(store, namesrv.address, port, acked)
                lost_total = max(lost_total, result["lost"])
                print(json.dumps({"after_round": number + 1, **result}), flush=True)
    summary = {
        "rounds": args.rounds,
        "acknowledged": len(acked),
        "lost": lost_total,
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    print(json.dumps({"summary": summary}))
    return 1 if lost_total else 0


if __name__ == "__main__":
    raise SystemExit(main())
