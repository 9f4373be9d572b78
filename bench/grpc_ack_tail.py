"""Where a gRPC ack's tail latency goes: the client's ack p99 beside the broker's own share of it.

    .venv/bin/python bench/grpc_ack_tail.py [--count 2000]

A broker with its gRPC endpoint (ASYNC flush, as bench/grpc_client_bench.py's) runs in this process on
a thread of its own; the Python 5.1.2 client (bench/grpc_client_peer.py) sends ``--count`` messages and
acks each. Over the measured pass it records the POP core's time per ack (the backend's ``ack``), the
broker event loop's lag (how late a 1 ms sleep wakes), the garbage collections, and, in a separate
idle process at the same time, the same lag: the machine's own scheduling delay, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import REPO, machine, print_machine  # noqa: E402
from sparkmq.broker.config import BrokerConfig  # noqa: E402
from sparkmq.broker.controller import BrokerController  # noqa: E402

PEER_PYTHON = REPO / ".venv-rocketmq5" / "bin" / "python"
PEER = REPO / "bench" / "grpc_client_peer.py"
IDLE_LAG = """
import asyncio, json, sys, time
async def main(seconds):
    lags, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter(); await asyncio.sleep(0.001); lags.append(time.perf_counter() - t0 - 0.001)
    print(json.dumps(lags))
asyncio.run(main(float(sys.argv[1])))
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] if ordered else 0.0


class Probes:
    """The broker-side figures of a pass: ack core times, loop lags, collections (seconds each)."""

    def __init__(self) -> None:
        self.acks: list[float] = []
        self.lags: list[float] = []
        self.collections: list[tuple[int, float]] = []
        self._gc_started = 0.0

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.collections.append((info["generation"], time.perf_counter() - self._gc_started))

    async def lag(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            self.lags.append(time.perf_counter() - started - 0.001)

    def clear(self) -> None:
        self.acks.clear()
        self.lags.clear()
        self.collections.clear()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    if not PEER_PYTHON.exists():
        raise SystemExit(f"{PEER_PYTHON} is missing: run `make rocketmq5-venv`")
    info = machine()
    store = Path(tempfile.mkdtemp(prefix="sparkmq-ack-tail-"))
    config = BrokerConfig(
        listen_port=0,
        store_path_root_dir=store,
        namesrv_addr="",
        enable_grpc_server=True,
        grpc_server_port=0,
        mapped_file_size_commit_log=64 << 20,
        max_hash_slot_num=5000,  # a small IndexFile, not the default 420 MB one
        max_index_num=20_000,
    )
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="broker", daemon=True).start()
    broker = BrokerController(config)
    asyncio.run_coroutine_threadsafe(broker.start(), loop).result(120)
    gc.collect()
    gc.freeze()  # as a broker's service does after its start (sparkmq/cli/service.py)
    assert broker.grpc is not None
    backend = broker.grpc.servicer.backend
    probes = Probes()
    real_ack = backend.ack

    async def timed_ack(*ack_args: Any) -> None:
        started = time.perf_counter()
        await real_ack(*ack_args)
        probes.acks.append(time.perf_counter() - started)

    backend.ack = timed_ack  # type: ignore[method-assign]
    asyncio.run_coroutine_threadsafe(probes.lag(), loop)
    gc.callbacks.append(probes.gc_callback)
    endpoint = f"{broker.config.broker_ip}:{broker.config.grpc_server_port}"
    peer = [str(PEER_PYTHON), str(PEER), endpoint]
    subprocess.run([*peer, "AckTailWarm", "AckTailWarmGroup", "--count", "1000"], check=True, capture_output=True)
    probes.clear()
    idle = subprocess.Popen([sys.executable, "-c", IDLE_LAG, str(max(10.0, args.count / 200))], stdout=subprocess.PIPE)
    run = subprocess.run(
        [*peer, "AckTail", "AckTailGroup", "--count", str(args.count)], check=True, capture_output=True, text=True
    )
    client = json.loads(run.stdout.strip().splitlines()[-1])
    idle_lags = json.loads(idle.communicate(timeout=300)[0])
    asyncio.run_coroutine_threadsafe(broker.close(), loop).result(60)
    shutil.rmtree(store, ignore_errors=True)
    print_machine(info)
    us = 1e6
    print(f"client ack p50 / p99:              {client['ack_p50_us']:8.0f} / {client['ack_p99_us']:8.0f} µs")
    print(
        f"POP core per ack p50 / p99 / max:  {pct(probes.acks, 50) * us:8.0f} / {pct(probes.acks, 99) * us:8.0f}"
        f" / {max(probes.acks, default=0) * us:.0f} µs"
    )
    print(
        f"broker loop lag p50 / p99 / p99.9: {pct(probes.lags, 50) * us:8.0f} / {pct(probes.lags, 99) * us:8.0f}"
        f" / {pct(probes.lags, 99.9) * us:.0f} µs"
    )
    print(
        f"idle process lag p50 / p99 / p99.9:{pct(idle_lags, 50) * us:8.0f} / {pct(idle_lags, 99) * us:8.0f}"
        f" / {pct(idle_lags, 99.9) * us:.0f} µs"
    )
    longest = max((seconds for _, seconds in probes.collections), default=0.0)
    full = sum(1 for generation, _ in probes.collections if generation == 2)
    print(f"garbage collections: {len(probes.collections)} (generation 2: {full}), longest {longest * us:.0f} µs")


if __name__ == "__main__":
    main()
