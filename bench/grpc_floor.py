"""The floor of bench/grpc_client_bench.py's server CPU: grpcio's own cost of one unary RPC on this machine.

    .venv/bin/python bench/grpc_floor.py [--count 3000]

A grpc.aio server (on uvloop, as the broker runs) whose Heartbeat answers at once, in its own process;
sequential Heartbeat calls from a sync channel here. Prints the server's CPU per call.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from bench_common import process_cpu

WARMUP = 200


class EmptyServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        return spb.HeartbeatResponse(status=pb.Status(code=pb.OK, message="OK"))


async def serve() -> None:
    server = grpc.aio.server()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(EmptyServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the bench closes stdin
    await server.stop(0)


def floor_cpu_us(count: int) -> float:
    """Server CPU µs per empty unary RPC, over ``count`` sequential calls after a warm-up."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            for _ in range(WARMUP):
                stub.Heartbeat(spb.HeartbeatRequest())
            before = sum(process_cpu(server.pid))
            for _ in range(count):
                stub.Heartbeat(spb.HeartbeatRequest())
            spent = sum(process_cpu(server.pid)) - before
        server.stdin.close()
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return spent / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        import uvloop

        uvloop.run(serve())
        return
    print(f"grpc.aio server CPU per empty unary RPC: {floor_cpu_us(args.count):.0f} µs")


if __name__ == "__main__":
    main()
