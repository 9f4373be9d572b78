"""Client ceiling: ``AsyncProducer.send`` against a stand-in broker that answers every send at once.

The producer learns its route from a real ``sparkmq dev``, then its connection is pointed at a
tiny answering process (uvloop, canned SEND_MESSAGE_V2 SUCCESS with the request's opaque), so the
client's own cost decides: what a single-send client can do once the broker is no longer the
bottleneck (issue 10's "≥ nats-py publish" is a client and a broker target at once). Figures are
client CPU µs per send (``time.process_time``) plus msgs/s; 100 B bodies::

    .venv/bin/python bench/client_ceiling_bench.py                  # 40,000 sends, 128 and 1 in flight, both styles
    .venv/bin/python bench/client_ceiling_bench.py --sends 10000 --inflight 1 64 512 --style callback

Two styles: ``await`` (N coroutines, each ``await producer.send(message)``) and ``callback`` (nats-py
``raw``'s shape in ../shared/peers/bench_nats.py: one loop, a semaphore window, ``send_async`` with a
callback that releases it: no coroutine or Task per send).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

from client_send_bench import windowed

from bench_common import REPO, DevProcess, machine, print_machine, run_loop, temp_root

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from sparkmq.client import AsyncProducer, Message

ANSWERING_BROKER = r"""
import asyncio, re, struct, sys, uvloop
OPAQUE = re.compile(rb'"opaque":(\d+)')
FIELDS = (b'"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{"msgId":"7F0000010000B1FB00000000000002EB",'
          b'"queueId":"1","queueOffset":"5","MSG_REGION":"DefaultRegion","TRACE_ON":"true"}}')
def answer(opaque):
    header = b'{"code":0,"flag":1,"language":"JAVA","opaque":%d,' % opaque + FIELDS
    return struct.pack(">II", len(header) + 4, len(header)) + header
class Answering(asyncio.Protocol):
    def connection_made(self, transport): self.transport, self.buffer = transport, b""
    def data_received(self, data):
        self.buffer += data
        out = []
        while len(self.buffer) >= 4:
            (length,) = struct.unpack_from(">I", self.buffer)
            if len(self.buffer) < 4 + length: break
            frame, self.buffer = self.buffer[: 4 + length], self.buffer[4 + length :]
            out.append(answer(int(OPAQUE.search(frame).group(1))))
        if out: self.transport.writelines(out)
async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Answering, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the bench closes stdin
uvloop.run(main())
"""
TOPIC = "ClientCeiling"
STYLES = {"await": "`await send()` per coroutine", "callback": "`send_async(callback)`, one loop"}


async def measure(namesrv: str, port: int, sends: int, inflights: Sequence[int], styles: Sequence[str]) -> list[str]:
    rows = []
    async with AsyncProducer("PID_CLIENT_CEILING", namesrv, send_timeout_s=30.0) as producer:
        messages = [Message(TOPIC, os.urandom(100)) for _ in range(sends)]
        for message in messages[:50]:  # auto-create the topic, learn the route, open the broker connection
            await producer.send(message)
        answering = await producer.instance.remoting.connection(f"127.0.0.1:{port}")
        lane = producer._lanes[TOPIC]
        for queue in lane.queues:
            lane.connections[queue.broker_name] = answering
        for message in messages[:500]:  # warm-up against the stand-in
            await producer.send(message)
        for style in styles:
            for inflight in inflights:
                items = iter(messages)

                async def worker(items: Iterator[Message] = items) -> None:
                    for message in items:  # one shared iterator: each message is sent once
                        await producer.send(message)

                cpu, started = time.process_time(), time.perf_counter()
                if style == "await":
                    await asyncio.gather(*(worker() for _ in range(inflight)))
                else:
                    await windowed(producer, messages, inflight)
                cpu, seconds = time.process_time() - cpu, time.perf_counter() - started
                rows.append(
                    f"| {STYLES[style]} | {inflight} | {sends:,} | {sends / seconds:,.0f} | {cpu / sends * 1e6:.1f} |"
                )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=40_000, help="sends per case (default 40,000)")
    parser.add_argument("--inflight", type=int, nargs="+", default=[128, 1], help="sends in flight (default 128 1)")
    parser.add_argument(
        "--style",
        nargs="+",
        choices=sorted(STYLES),
        default=["await", "callback"],
        help="await: N coroutines each awaiting send (default both); callback: nats-py raw's shape",
    )
    args = parser.parse_args(argv)
    info = machine()
    stand_in = subprocess.Popen(
        [sys.executable, "-c", ANSWERING_BROKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert stand_in.stdout is not None
        port = int(stand_in.stdout.readline())
        with temp_root("sparkmq-client-ceiling-") as root:
            dev = DevProcess(root)
            try:
                rows = run_loop(measure(dev.namesrv, port, args.sends, args.inflight, args.style), "uvloop")
            finally:
                dev.stop()
    finally:
        assert stand_in.stdin is not None
        stand_in.stdin.close()
        stand_in.wait(30)
    print_machine(info)
    print(
        "\n| style | in flight | sends | msgs/s | client CPU µs/send |\n|---|---:|---:|---:|---:|\n" + "\n".join(rows)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
