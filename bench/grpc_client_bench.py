"""The RocketMQ 5 Python client (rocketmq-python-client 5.1.2, gRPC) against a sparkmq broker's gRPC endpoint.

    .venv/bin/python bench/grpc_client_bench.py [--count 2000] [--size 128] [--flush async|sync]

Starts one broker (enableGrpcServer) and runs bench/grpc_client_peer.py in .venv-rocketmq5
(``make rocketmq5-venv``): sequential sends, then receive (batches of 32) + ack of each message.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import REPO, SMALL_STORE, Service, free_port, machine, print_machine, temp_root

PEER_PYTHON = REPO / ".venv-rocketmq5" / "bin" / "python"
PEER = REPO / "bench" / "grpc_client_peer.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--flush", choices=("async", "sync"), default="async")
    args = parser.parse_args()
    if not PEER_PYTHON.exists():
        raise SystemExit(f"{PEER_PYTHON} is missing: run `make rocketmq5-venv`")
    info = machine()
    with temp_root("grpc-bench-") as root:
        port = free_port()
        broker = Service(
            ["broker", "--host", "127.0.0.1", "--port", "0", "--store-dir", str(root / "store"), "--flush", args.flush]
            + SMALL_STORE
            + ["--set", "enableGrpcServer=true", "--set", f"grpcServerPort={port}"],
            "broker listening on",
        )
        try:
            cpu_before = broker.cpu_seconds()
            run = subprocess.run(
                [str(PEER_PYTHON), str(PEER), f"127.0.0.1:{port}", "GrpcBench", "GrpcBenchGroup"]
                + ["--count", str(args.count), "--size", str(args.size)],
                capture_output=True,
                text=True,
                timeout=900,
                check=True,
                cwd=root,
            )
            broker_cpu = broker.cpu_seconds() - cpu_before
        finally:
            broker.stop()
        figures = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"flush {args.flush}, {args.count} x {args.size} B")
        print(
            f"send (sequential):  {figures['send_per_s']:8.0f} msg/s  p50 {figures['send_p50_us']:7.0f} µs  "
            f"p99 {figures['send_p99_us']:7.0f} µs"
        )
        print(
            f"receive + ack:      {figures['receive_ack_per_s']:8.0f} msg/s  ack p50 {figures['ack_p50_us']:7.0f} µs  "
            f"p99 {figures['ack_p99_us']:7.0f} µs  ({figures['received']} received)"
        )
        print(
            f"broker CPU: {broker_cpu:.2f} s ({broker_cpu / (2 * args.count) * 1e6:.0f} µs per message sent or acked)"
        )
        print_machine(info)


if __name__ == "__main__":
    main()
