"""nats-py raw and sparkmq in nats-py raw's shape, alternately in one run: a ratio per round and their median.

One run of each side apart measures the machine's mood as much as the clients (nats-py raw alone moved
86k-130k msgs/s between runs on a shared VM). ``interleaved_rounds`` runs them in turns against servers that
stay up: a JetStream ``nats-server`` (file storage, as the peers' ``run_all.sh`` starts it) and the bench's
``sparkmq dev``. Each round runs the peers' ``bench_nats.py --mode publish --style raw --window 1000`` (its
window, message count and body, as ``run_all.sh`` runs it) and ``send_async`` in the same shape (one loop, a
semaphore window of ``--inflight``, callbacks), in ABBA order (round 1 nats-py first, round 2 sparkmq first,
...), so a drift of the machine's load falls on both. Per round: both rates, their ratio, the broker's and the
client's CPU per send, the NATS server's and nats-py's; then the medians.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_common import Recorder, Row, free_port, loadavg

NATS_WINDOW = 1000  # run_all.sh's --window for every nats-py publish style
NATS_COUNT = 200_000  # run_all.sh's N100: messages of 100 B per publish run
ROUND_SIZE = 100
NATS_TIMEOUT_S = 300.0


@dataclass
class Round:
    """One round: nats-py raw's record (bench_nats.py's JSON) and sparkmq's row, and the order they ran in."""

    number: int
    nats: dict
    ours: Row
    nats_first: bool
    load: str

    @property
    def ratio(self) -> float:
        return self.ours.msgs_per_s / self.nats["msgs_per_s"]

    @property
    def broker_us(self) -> float:
        return sum(self.ours.broker_cpu) / self.ours.messages * 1e6

    @property
    def client_us(self) -> float:
        return sum(self.ours.client_cpu) / self.ours.messages * 1e6


@contextmanager
def nats_server(root: Path) -> Iterator[tuple[int, int]]:
    """A JetStream ``nats-server`` on a free loopback port, its store under ``root``: (port, pid); stopped by its
    handle afterwards."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = subprocess.Popen(
        ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(root), "-l", str(root / "nats.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server did not listen on {port}: see {root / 'nats.log'}") from None
                time.sleep(0.05)
        yield port, process.pid
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def nats_raw(python: Path, peers_dir: Path, port: int, pid: int, number: int, count: int) -> dict:
    """One ``bench_nats.py`` raw publish run (run_all.sh's arguments); its JSON record."""
    process = await asyncio.create_subprocess_exec(
        str(python),
        "bench_nats.py",
        *("--port", str(port), "--server-pid", str(pid), "--mode", "publish", "--style", "raw"),
        *("--window", str(NATS_WINDOW), "--size", str(ROUND_SIZE), "--count", str(count), "--rep", str(number)),
        cwd=peers_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), NATS_TIMEOUT_S)
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"bench_nats.py exited {process.returncode}: {err.decode()[-2000:]}")
    return json.loads(lines[-1])


async def interleaved_rounds(
    bench: Recorder,
    windowed_send: Callable[[list[Any]], Awaitable[None]],
    inflight: int,
    rounds: int,
    python: Path,
    peers_dir: Path,
    root: Path,
    count: int = NATS_COUNT,
) -> list[Round]:
    """``rounds`` rounds of nats-py raw and ``windowed_send(messages)`` (sparkmq in its shape), ``count`` messages
    each, in ABBA order."""
    messages = bench.messages("ClientBenchRounds100", count, ROUND_SIZE)
    await windowed_send(messages[:1000])  # the topic's route and connection
    done: list[Round] = []
    with nats_server(root / "nats") as (port, pid):
        for number in range(1, rounds + 1):
            nats_first = number % 2 == 1
            nats: dict = {}
            ours: Row | None = None
            for side in ("nats", "ours") if nats_first else ("ours", "nats"):
                if side == "nats":
                    nats = await nats_raw(python, peers_dir, port, pid, number, count)
                    print(f"  round {number}: nats-py raw {nats['msgs_per_s']:>12,.0f} msgs/s", file=sys.stderr)
                else:
                    ours = await bench.timed(
                        f"send_async x1, {inflight} in flight, one loop, round {number}",
                        ROUND_SIZE,
                        len(messages),
                        lambda: windowed_send(messages),
                        "nats-py raw's shape",
                        keep=False,
                    )
            assert ours is not None
            done.append(Round(number, nats, ours, nats_first, loadavg()))
    return done


def rounds_table(rounds: list[Round]) -> str:
    """Every round, then the medians; the targets of issue 29 (ratio ≥ 1.5, broker ≤ 4 µs per send) named."""
    lines = [
        "| round | first | nats-py raw msgs/s | sparkmq msgs/s | ratio | sparkmq broker + client CPU µs/send | "
        "NATS server + nats-py CPU µs/msg | load after |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rounds:
        server, client = r.nats.get("server_us_per_msg") or 0.0, r.nats.get("client_us_per_msg") or 0.0
        lines.append(
            f"| {r.number} | {'nats-py' if r.nats_first else 'sparkmq'} | {r.nats['msgs_per_s']:,.0f} | "
            f"{r.ours.msgs_per_s:,.0f} | {r.ratio:.2f}× | {r.broker_us:.1f} + {r.client_us:.1f} | "
            f"{server:.1f} + {client:.1f} | {r.load} |"
        )
    if rounds:
        ratio = statistics.median(r.ratio for r in rounds)
        broker = statistics.median(r.broker_us for r in rounds)
        client = statistics.median(r.client_us for r in rounds)
        lines += [
            "",
            f"median of {len(rounds)} rounds: ratio **{ratio:.2f}×** (target ≥ 1.5×: {_met(ratio >= 1.5)}), broker"
            f" {broker:.1f} µs per send (target ≤ 4: {_met(broker <= 4)}), client {client:.1f} µs",
        ]
    return "\n".join(lines)


def _met(met: bool) -> str:
    return "met" if met else "not met"
