"""NATS JetStream in client_scale_bench's connections shape: 1, 10, 100 connections, 128 publishes in flight.

Run from the repo root (nats-server on PATH, nats-py in the peers' virtualenv, ../shared/peers/setup.sh)::

    .venv/bin/python bench/client_scale_nats.py --sends 100000
    .venv/bin/python bench/client_scale_nats.py --sends 100000 --connections 1 100 --peers-python PY

The same shape as ``client_scale_bench.py``'s connections cases, so the docs can say what a C (Go)
server pays in it on this machine: one fresh ``nats-server -js`` (file storage, acknowledged from
the page cache as our ASYNC flush), one stream on ``scale.>``, 100 B bodies, ``--inflight`` (128)
workers in one nats-py process on asyncio's loop, worker k awaiting ``js.publish`` (each waits for
its PubAck) on connection k mod N. Each case prints msgs/s, its ratio to the same run's 1
connection, and the server's and the client's CPU µs per message (/proc, all threads).

The client part runs under the peers' python (``--worker``), which has nats-py but not sparkmq:
that part imports only the standard library and nats.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

CONNECTION_COUNTS = (1, 10, 100)
PEERS_PYTHON = Path(os.environ.get("TMPDIR", "/tmp")) / "sparkmq-peers" / "venv" / "bin" / "python"
STREAM = "SCALE"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` (all threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def worker_cases(port: int, server_pid: int, sends: int, inflight: int, counts: Sequence[int]) -> list[dict]:
    """The client side (peers' python): one timed case per connection count."""
    import nats  # only the peers' virtualenv has it
    from nats.js.api import StorageType, StreamConfig
    from nats.js.errors import NotFoundError

    rows = []
    body = bytes(range(100))
    for count in counts:
        connections = [await nats.connect(f"nats://127.0.0.1:{port}") for _ in range(count)]
        streams = [nc.jetstream() for nc in connections]
        try:
            with contextlib.suppress(NotFoundError):  # the first case has no stream to delete yet
                await streams[0].delete_stream(STREAM)
            await streams[0].add_stream(
                StreamConfig(name=STREAM, subjects=["scale.>"], storage=StorageType.FILE, num_replicas=1)
            )
            for js in streams:  # every connection warm
                await js.publish("scale.data", b"warm-up")
            left = sends

            async def worker(js: object) -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await js.publish("scale.data", body)  # type: ignore[attr-defined]

            server0, client0, wall0 = process_cpu_s(server_pid), time.process_time(), time.perf_counter()
            await asyncio.gather(*(worker(streams[k % count]) for k in range(max(inflight, count))))
            wall = time.perf_counter() - wall0
            client, server = time.process_time() - client0, process_cpu_s(server_pid) - server0
            rows.append(dict(connections=count, sends=sends, seconds=wall, client_cpu_s=client, server_cpu_s=server))
        finally:
            for nc in connections:
                await nc.close()
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def run(sends: int, inflight: int, counts: Sequence[int], python: Path) -> list[dict]:
    """Start nats-server in a temp dir, run the worker under ``python``, stop the server by its handle."""
    server_bin = shutil.which("nats-server")
    if server_bin is None:
        raise SystemExit("nats-server is not on PATH (../shared/peers/setup.sh installs it)")
    root = Path(tempfile.mkdtemp(prefix="sparkmq-scale-nats-"))
    port = free_port()
    server = subprocess.Popen(
        [server_bin, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(root), "-l", str(root / "nats.log")]
    )
    try:
        wait_port(port)
        args = [str(python), __file__, "--worker", "--port", str(port), "--server-pid", str(server.pid)]
        args += ["--sends", str(sends), "--inflight", str(inflight), "--connections", *map(str, counts)]
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(root, ignore_errors=True)


def table(rows: list[dict]) -> str:
    base = rows[0]["sends"] / rows[0]["seconds"]
    lines = [
        "| NATS JS connections | msgs/s | ratio to 1 connection | server CPU µs/msg | client CPU µs/msg |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        rate = row["sends"] / row["seconds"]
        server, client = (row[k] / row["sends"] * 1e6 for k in ("server_cpu_s", "client_cpu_s"))
        lines.append(f"| {row['connections']} | {rate:,.0f} | {rate / base:.2f}× | {server:.1f} | {client:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=20_000, help="publishes per case (default 20,000)")
    parser.add_argument("--inflight", type=int, default=128, help="publishes in flight (default 128)")
    parser.add_argument(
        "--connections", type=int, nargs="+", default=CONNECTION_COUNTS, help="connection counts (default 1 10 100)"
    )
    parser.add_argument("--peers-python", type=Path, default=PEERS_PYTHON, help="python with nats-py")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        for row in asyncio.run(worker_cases(args.port, args.server_pid, args.sends, args.inflight, args.connections)):
            print(json.dumps(row), flush=True)
        return 0
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    rows = run(args.sends, args.inflight, args.connections, args.peers_python)
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} | load at start: {' '.join(load0)}"
        f" | load at end: {' '.join(load1)} | python: {sys.version.split()[0]} (driver)"
    )
    print("\n## NATS JetStream publishes as connections grow (100 B, nats-py, asyncio)\n\n" + table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
