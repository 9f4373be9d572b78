"""The peers beside sparkmq's client benches: run ``../shared/peers/run_all.sh`` and compare in one table.

``run_peers`` runs ``run_all.sh`` (``ONLY="versions redis nats"``, ``PEERS_OUT`` a temporary
directory, the peers' virtualenv from ``setup.sh``) and returns its raw JSON records; the peers'
directory is ``--peers-dir``, else ``$SPARKMQ_PEERS_DIR``, else ``shared/peers`` beside the repo;
``side_by_side``, ``targets`` and ``peers_table`` render them beside sparkmq's rows.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
from pathlib import Path

from bench_common import REPO, Row

SIZES = (100, 1024)
PEERS_TIMEOUT_S = 1800.0
PEERS_DIR = Path(os.environ.get("SPARKMQ_PEERS_DIR") or REPO.parent / "shared" / "peers")
PEERS_BASE = Path(os.environ.get("TMPDIR", "/tmp")) / "sparkmq-peers"  # setup.sh's default PEERS_OUT


def add_peers_python_argument(parser: argparse.ArgumentParser, needs: str = "") -> None:
    """``--peers-python``: the python of the peers' virtualenv (setup.sh), ``needs`` said after it."""
    parser.add_argument(
        "--peers-python",
        type=Path,
        default=PEERS_BASE / "venv" / "bin" / "python",
        help="python of the peers' virtualenv (setup.sh)" + needs,
    )


def add_peers_dir_argument(parser: argparse.ArgumentParser) -> None:
    """``--peers-dir``: the directory holding the peers' ``run_all.sh`` and ``setup.sh``."""
    parser.add_argument(
        "--peers-dir",
        type=Path,
        default=PEERS_DIR,
        help=f"the peers' directory, with run_all.sh (default: $SPARKMQ_PEERS_DIR, else {PEERS_DIR})",
    )


def run_peers(
    out: Path, only: str, reps: int, python: Path, latency_count: int, peers_dir: Path = PEERS_DIR
) -> tuple[list[dict], str]:
    """Run ``peers_dir``'s run_all.sh into ``out``; its raw JSON records and versions text.

    ``latency_count`` is the peers' NLAT: as many one-at-a-time publishes as sparkmq's latency
    cases send, so both p99s are the same rank of the same number of samples. Raises
    ``FileNotFoundError`` naming what is missing (the peers' directory, or their virtualenv's python).
    """
    if not (peers_dir / "run_all.sh").is_file():
        raise FileNotFoundError(
            f"no run_all.sh in {peers_dir}: pass --peers-dir or set SPARKMQ_PEERS_DIR to the peers' directory"
        )
    if not python.exists():
        raise FileNotFoundError(f"no peers' python at {python}: run bash {peers_dir / 'setup.sh'} once")
    out.mkdir(parents=True, exist_ok=True)
    (out / "venv").symlink_to(python.parent.parent)
    cached = PEERS_BASE / "bin" / "natsbench"  # the Go client setup.sh's first run_all.sh built; else built here
    if cached.exists():
        (out / "bin").mkdir()
        (out / "bin" / "natsbench").symlink_to(cached)
    env = dict(
        os.environ,
        PEERS_OUT=str(out),
        PY=str(python),
        ONLY=f"versions {only}",
        REPS=str(reps),
        STAMP="clientbench",
        NLAT=str(latency_count),
    )
    process = subprocess.Popen(
        ["bash", str(peers_dir / "run_all.sh")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        code = process.wait(PEERS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # run_all.sh's trap stops the servers it started, by PID
        process.wait(60)
        raise
    results = out / "raw" / "results-clientbench.jsonl"
    if code != 0 or not results.exists():
        log = out / "raw" / "run-clientbench.log"
        tail = log.read_text().splitlines()[-30:] if log.exists() else []
        raise RuntimeError(f"run_all.sh exited {code}:\n" + "\n".join(tail))
    versions = out / "raw" / "versions-clientbench.txt"
    return (
        [json.loads(line) for line in results.read_text().splitlines() if line.strip()],
        versions.read_text() if versions.exists() else "",
    )


# (column label, peer, test for produce, consume, latency); redis rows from the appendfsync=everysec runs
PEER_COLUMNS = (
    ("NATS JS, Go", "nats-js", "publish_go_async1000", "consume_go_fetch1000", "latency_go_sync_publish"),
    ("NATS JS, nats-py", "nats-js", "publish_*", "consume_fetch1000", "latency_sync_publish"),
    ("Redis, redis-benchmark (C)", "redis", "publish_redis-benchmark_c1_P1000", None, None),
    ("Redis, redis-py", "redis", "publish_pipe1000", "consume_xread1000", "latency_sync_xadd"),
)


def peer_record(records: list[dict], peer: str, test: str | None, size: int) -> dict | None:
    """The record of ``test`` (``publish_*``: the fastest publish style); redis only at appendfsync everysec."""
    if test is None:
        return None
    found = [
        r
        for r in records
        if r["peer"] == peer
        and r["size"] == size
        and (r["test"] == test or (test.endswith("*") and r["test"].startswith(test[:-1]) and "_go_" not in r["test"]))
        and r.get("appendfsync", "everysec") == "everysec"
    ]
    return max(found, key=lambda r: r.get("msgs_per_s") or 0, default=None)


def side_by_side(rows: list[Row], records: list[dict]) -> str:
    head = "| sparkmq case | body | sparkmq msgs/s | " + " | ".join(f"{c[0]} msgs/s | ×" for c in PEER_COLUMNS) + " |"
    lines = [head, "|---|---|---:|" + "---:|---:|" * len(PEER_COLUMNS)]
    for row in rows:
        kind = "consume" if row.case.startswith(("pull", "poll")) else "produce" if not row.latency_us else None
        if kind is None:
            continue
        cells = []
        for _label, peer, produce, consume, _lat in PEER_COLUMNS:
            rec = peer_record(records, peer, produce if kind == "produce" else consume, row.size)
            rate = rec.get("msgs_per_s") if rec else None
            cells.append(f"{rate:,.0f} | {row.msgs_per_s / rate:.2f}×" if rate else "- | -")
        lines.append(f"| {row.case} | {row.size} B | **{row.msgs_per_s:,.0f}** | " + " | ".join(cells) + " |")
    lines += [
        "",
        "CPU per message, server + client (µs; × = peer ÷ sparkmq, above 1 means sparkmq spends less):",
        "",
        "| sparkmq case | body | sparkmq broker+client | " + " | ".join(f"{c[0]} | ×" for c in PEER_COLUMNS) + " |",
        "|---|---|---:|" + "---:|---:|" * len(PEER_COLUMNS),
    ]
    for row in rows:
        kind = "consume" if row.case.startswith(("pull", "poll")) else "produce" if not row.latency_us else None
        if kind is None:
            continue
        ours = (sum(row.broker_cpu) + sum(row.client_cpu)) / row.messages * 1e6
        cells = []
        for _label, peer, produce, consume, _lat in PEER_COLUMNS:
            rec = peer_record(records, peer, produce if kind == "produce" else consume, row.size)
            theirs = (rec.get("server_us_per_msg") or 0) + (rec.get("client_us_per_msg") or 0) if rec else 0
            note = "" if not rec or rec.get("client_us_per_msg") is not None else " (server only)"
            cells.append(f"{theirs:.1f}{note} | {theirs / ours:.2f}×" if theirs else "- | -")
        lines.append(f"| {row.case} | {row.size} B | {ours:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "| latency, 1 in flight | body | p50 µs | p99 µs | max µs |", "|---|---|---:|---:|---:|"]
    for row in rows:
        if row.latency_us:
            lines.append(
                f"| sparkmq {row.case} | {f'{row.size} B' if row.size else '-'} | {row.pct(50):.0f} | "
                f"**{row.pct(99):.0f}** | {max(row.latency_us):,.0f} |"
            )
    for size in SIZES:
        for label, peer, _p, _c, lat in PEER_COLUMNS:
            rec = peer_record(records, peer, lat, size)
            if rec:
                lines.append(
                    f"| {label}: {rec['test']} | {size} B | {rec['p50_us']:.0f} | {rec['p99_us']:.0f} | "
                    f"{rec['max_us']:,.0f} |"
                )
    return "\n".join(lines)


def targets(rows: list[Row], records: list[dict]) -> str:
    def row_of(prefix: str) -> Row | None:
        return next((r for r in rows if r.case.startswith(prefix) and r.size == 100), None)

    lines = ["| target (100 B) | sparkmq | reference | ratio | met? |", "|---|---:|---:|---:|---|"]
    for what, prefix, test in (
        ("single sends, 128 in flight ≥ 1.0× nats-py's fastest publish", "send x1, 128 in flight", "publish_*"),
        ("the same in nats-py raw's shape (one loop, callbacks)", "send_async x1, 128 in flight", "publish_raw*"),
        ("send_batch 256 ≥ 1.0× NATS Go publish", "send_batch 256", "publish_go_async1000"),
        ("consume (pull_raw) ≥ 1.0× NATS Go fetch", "pull_raw", "consume_go_fetch1000"),
        ("consume (poll → objects) ≥ 1.0× NATS Go fetch", "poll", "consume_go_fetch1000"),
    ):
        row, rec = row_of(prefix), peer_record(records, "nats-js", test, 100)
        if row is None:
            continue
        if rec:
            ratio = row.msgs_per_s / rec["msgs_per_s"]
            lines.append(
                f"| {what} | {row.msgs_per_s:,.0f} | {rec['msgs_per_s']:,.0f} | {ratio:.2f}× | "
                f"{'yes' if ratio >= 1 else 'no'} |"
            )
        else:
            lines.append(f"| {what} | {row.msgs_per_s:,.0f} | (no peers run) | - | - |")
    for prefix in ("send x1, 1 in flight", "Producer.send"):
        row = row_of(prefix)
        for who, test in (("nats-py", "latency_sync_publish"), ("NATS Go", "latency_go_sync_publish")):
            rec = peer_record(records, "nats-js", test, 100)
            if row is None or rec is None:
                continue
            p99, theirs = row.pct(99), rec["p99_us"]
            lines.append(
                f"| {row.case}: p99 ≤ {who}'s | {p99:.0f} µs | {theirs:.0f} µs | {p99 / theirs:.2f}× | "
                f"{'yes' if p99 <= theirs else 'no'} |"
            )
    return "\n".join(lines)


def peers_table(records: list[dict]) -> str:
    lines = [
        "| peer | test | client | body | msgs | msgs/s | p50 µs | p99 µs | server µs/msg | client µs/msg | config |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in records:
        if r.get("peer") not in ("redis", "nats-js"):
            continue
        rate = f"{r['msgs_per_s']:,.0f}" if r.get("msgs_per_s") else "-"
        lines.append(
            f"| {r['peer']} | {r['test']} | {r.get('client', '').split(' (')[0]} | {r['size']} B | "
            f"{r['count']:,} | {rate} | "
            f"{_fmt(r.get('p50_us'))} | {_fmt(r.get('p99_us'))} | {_fmt(r.get('server_us_per_msg'))} | "
            f"{_fmt(r.get('client_us_per_msg'))} | "
            f"{'appendfsync ' + r['appendfsync'] if 'appendfsync' in r else r.get('storage', '')} |"
        )
    return "\n".join(lines)


def _fmt(x: object) -> str:
    return f"{x:,.1f}" if isinstance(x, (int, float)) else "-"
