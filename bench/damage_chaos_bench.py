"""Damage chaos: bytes flipped in a stopped broker's store files, round after round, and nothing intact lost.

A real NameServer and ``sparkmq broker`` (SYNC flush, small segments) on one store directory. Each
round starts the broker, sends ``--per-round`` messages with SYNC flush acknowledgements (sparkmq's
producer, and the real C++ client's on odd rounds), stops the broker (SIGKILL on every other round,
SIGTERM otherwise) and flips a few bytes of one store file, taking turns: a ConsumeQueue file, an
IndexFile, a CommitLog segment. At the end a broker starts on the damaged store and:

* the real C++ push consumer (a new group) and a Spark batch read (``format("sparkmq")``, local reads
  on, its default) must each see every acknowledged message whose CommitLog bytes are intact;
* the messages whose CommitLog bytes were flipped are the only ones allowed missing: they are found
  by restoring the flipped bytes in a copy of the CommitLog and walking it; no reader may get a body
  that no acknowledged message had (a damaged body served);
* the broker must have started every round and be alive at the end; its damage counters (Prometheus
  lines naming damage, corruption or repair) are printed.

    .venv/bin/python bench/damage_chaos_bench.py                 # 12 rounds, ~2-4 min on 2 cores
    .venv/bin/python bench/damage_chaos_bench.py --rounds 30 --seed 7

Prints one JSON line per round and a summary; exits 1 if an intact acknowledged message is missing
from either reader or the broker failed. Needs ``.venv-rocketmq`` (``make venv``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from crash_loop_bench import BROKER_FLAGS as CRASH_LOOP_FLAGS
from crash_loop_bench import start_broker as start_retrying

import sparkmq
from bench_common import bench_root, free_port, machine
from sparkmq.message import layout
from sparkmq.message.record import decode_record
from support.processes import BrokerProcess, NamesrvProcess
from support.rocketmq_cpp import CppClientRun

TOPIC = "DamageChaosTopic"
SEND_OK = 0
BROKER_FLAGS = (
    *CRASH_LOOP_FLAGS[:-1],
    "brokerName=chaos-broker",
    "--set",
    "metricsExporterType=PROM",
    "--set",
    "metricsPromExporterHost=127.0.0.1",
)
METRICS_PORT = free_port()
KINDS = ("consumequeue", "index", "commitlog")
_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
CQ_UNIT = 20  # physical offset (8), size (4), tags code (8)


@dataclass
class Flip:
    """Bytes changed in one store file: where, and what was there before."""

    kind: str
    path: Path
    position: int
    original: bytes

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "file": self.path.name, "position": self.position, "bytes": len(self.original)}


@dataclass
class Chaos:
    store: Path
    rng: random.Random
    acked: set[str] = field(default_factory=set)
    flips: list[Flip] = field(default_factory=list)
    broker_failures: list[str] = field(default_factory=list)


def written_end(data: bytes) -> int:
    """One past the last non-zero byte: store files are preallocated with zeros."""
    return len(data.rstrip(b"\0"))


def flip_bytes(chaos: Chaos, kind: str) -> Flip | None:
    """Flip 1-4 bytes inside the written part of a random file of ``kind``; None if there is none yet."""
    folder = chaos.store / kind
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []
    candidates = [(p, written_end(p.read_bytes())) for p in files]
    candidates = [(p, end) for p, end in candidates if end > 64]
    if not candidates:
        return None
    path, end = chaos.rng.choice(candidates)
    count = chaos.rng.randint(1, 4)
    position = chaos.rng.randrange(0, end - count)
    if kind == "consumequeue" and chaos.rng.random() < 0.75:  # most flips hit a unit's offset or size field
        position = position - position % CQ_UNIT + chaos.rng.choice((4, 7, 8, 11))
        count = 1
    with path.open("r+b") as handle:
        handle.seek(position)
        original = handle.read(count)
        handle.seek(position)
        handle.write(bytes(b ^ chaos.rng.randint(1, 255) for b in original))
    flip = Flip(kind, path, position, original)
    chaos.flips.append(flip)
    return flip


def damaged_bodies(chaos: Chaos) -> tuple[set[str], set[str]]:
    """Bodies of the records whose CommitLog bytes were flipped (found in a restored copy), and of
    those among them whose body bytes were flipped."""
    hits = [flip for flip in chaos.flips if flip.kind == "commitlog"]
    damaged: set[str] = set()
    in_body: set[str] = set()
    for path in {flip.path for flip in hits}:
        data = bytearray(path.read_bytes())
        for flip in hits:
            if flip.path == path:
                data[flip.position : flip.position + len(flip.original)] = flip.original
        spans = [(f.position, f.position + len(f.original)) for f in hits if f.path == path]
        pos = 0
        while pos + _HEAD.size <= len(data):
            total, magic = _HEAD.unpack_from(data, pos)
            if magic != layout.MESSAGE_MAGIC_CODE or total <= 0:
                break  # the segment's blank filler, or the end of what was written
            record = decode_record(data, pos)
            body = bytes(record.body).decode()
            if any(start < pos + total and pos < end for start, end in spans):
                damaged.add(body)
            body_at = pos + layout.POS_BODY
            if any(start < body_at + len(record.body) and body_at < end for start, end in spans):
                in_body.add(body)
            pos += total
    return damaged, in_body


def start_broker(chaos: Chaos, namesrv: str, port: int) -> BrokerProcess | None:
    """The broker on the store; None (recorded) if it did not come up."""
    try:
        return start_retrying(
            chaos.store, namesrv, port, (*BROKER_FLAGS, "--set", f"metricsPromExporterPort={METRICS_PORT}")
        )
    except RuntimeError as exc:
        chaos.broker_failures.append(str(exc)[-400:])
        return None


def send_python(namesrv: str, prefix: str, count: int) -> set[str]:
    acked: set[str] = set()
    with sparkmq.Producer("PID_CHAOS_PY", namesrv) as producer:
        for index in range(count):
            body = f"{prefix}-body-{index}"
            result = producer.send(sparkmq.Message(TOPIC, body.encode(), keys=[body]))
            if result.status.name == "SEND_OK":
                acked.add(body)
    return acked


def send_cpp(home: Path, namesrv: str, prefix: str, count: int) -> set[str]:
    run = CppClientRun.start(
        home, "produce", "--namesrv", namesrv, "--topic", TOPIC, "--group", "PID_CHAOS_CPP",
        "--count", str(count), "--prefix", prefix,
    )  # fmt: skip
    records = run.finish(120.0)
    return {f"{prefix}-body-{r['index']}" for r in records if r.get("event") == "sent" and r.get("status") == SEND_OK}


def run_round(chaos: Chaos, number: int, namesrv: str, port: int, home: Path, per_round: int) -> dict[str, object]:
    broker = start_broker(chaos, namesrv, port)
    if broker is None:
        return {"round": number, "broker": "failed to start"}
    prefix = f"r{number}"
    try:
        sent = send_cpp(home, namesrv, prefix, per_round) if number % 2 else send_python(namesrv, prefix, per_round)
        alive = broker.process.poll() is None
    finally:
        if number % 2:
            broker.kill()
        else:
            broker.stop()
    chaos.acked |= sent
    flip = flip_bytes(chaos, KINDS[number % len(KINDS)])
    if not alive:
        chaos.broker_failures.append(f"round {number}: broker died while serving")
    return {"round": number, "acked": len(sent), "flip": flip.describe() if flip else None, "alive": alive}


def cpp_consumed(home: Path, namesrv: str, expected: int) -> set[str]:
    run = CppClientRun.start(
        home, "push-consume", "--namesrv", namesrv, "--topic", TOPIC, "--group", "CID_CHAOS_CPP",
        "--count", str(expected), "--deadline", "90",
    )  # fmt: skip
    return {r["body"] for r in run.finish(120.0) if r.get("event") == "received"}


def spark_read(namesrv: str) -> list[str]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("damage-chaos")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    try:
        frame = (
            spark.read.format("sparkmq")
            .option("namesrvAddr", namesrv)
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        return [bytes(row.body).decode("utf-8", "replace") for row in frame.select("body").collect()]
    finally:
        spark.stop()


def damage_metrics() -> list[str]:
    """The broker's Prometheus lines about damage, corruption or repair."""
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    words = ("damage", "corrupt", "repair")
    return [line for line in text.splitlines() if not line.startswith("#") and any(w in line for w in words)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--per-round", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261128)
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "rounds": args.rounds, "per_round": args.per_round}), flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=bench_root()) as tmp, NamesrvProcess.start() as namesrv:
        chaos = Chaos(Path(tmp) / "store", random.Random(args.seed))
        home, port = Path(tmp) / "home", free_port()
        for number in range(args.rounds):
            print(json.dumps(run_round(chaos, number, namesrv.address, port, home, args.per_round)), flush=True)
        lost, body_damaged = damaged_bodies(chaos)
        intact = chaos.acked - lost
        broker = start_broker(chaos, namesrv.address, port)
        if broker is None:
            print(json.dumps({"summary": {"broker_failures": chaos.broker_failures}}))
            return 1
        try:
            by_cpp = cpp_consumed(home, namesrv.address, len(intact))
            by_spark = spark_read(namesrv.address)
            metrics = damage_metrics()
            alive = broker.process.poll() is None
        finally:
            broker.stop()
    missing_cpp = sorted(intact - by_cpp)
    missing_spark = sorted(intact - set(by_spark))
    summary = {
        "rounds": args.rounds,
        "acknowledged": len(chaos.acked),
        "flips": {kind: sum(f.kind == kind for f in chaos.flips) for kind in KINDS},
        "damaged_in_commitlog": len(lost & chaos.acked),
        "body_damaged": len(body_damaged & chaos.acked),
        "body_damage_served": len((by_cpp | set(by_spark)) - chaos.acked),  # a flipped body matches no ack
        # damaged records served with their bodies intact (flips in head fields or properties)
        "damaged_served_cpp": len(by_cpp & lost),
        "damaged_served_spark": len(set(by_spark) & lost),
        "spark_duplicates": len(by_spark) - len(set(by_spark)),
        "intact": len(intact),
        "cpp_consumed_intact": len(intact & by_cpp),
        "spark_read_intact": len(intact & set(by_spark)),
        "cpp_consumed_all": len(by_cpp),
        "spark_rows": len(by_spark),
        "missing_cpp": missing_cpp[:5],
        "missing_spark": missing_spark[:5],
        "broker_failures": chaos.broker_failures + ([] if alive else ["broker dead at the end"]),
        "damage_metrics": metrics,
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    print(json.dumps({"summary": summary}), flush=True)
    failed = missing_cpp or missing_spark or summary["broker_failures"] or summary["body_damage_served"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
