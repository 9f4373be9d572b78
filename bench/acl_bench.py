"""ACL 1.0 benchmark: what checking (broker) and signing (client) cost per single send.

Run from the repo root::

    .venv/bin/python bench/acl_bench.py              # about 1 min
    .venv/bin/python bench/acl_bench.py --quick      # smoke run, ~15 s

Two parts:

* **In-process micro figures** (no sockets, no scheduler noise): ``AclValidator.check`` of a
  signed SEND_MESSAGE_V2 request as the broker sees it (100 B body, the fields the Java and
  sparkmq producers send), and ``SessionCredentials.sign`` of the same fields (the client's
  side). CPU microseconds per call from ``time.process_time``.
* **End to end**: a ``sparkmq namesrv`` and a ``sparkmq broker`` subprocess (ASYNC flush,
  small segments, a temporary store removed afterwards), once with ``aclEnable=false`` and an
  unsigned ``AsyncProducer``, once with ``aclEnable=true`` and a signing one; ``--sends``
  messages of 100 B sent one at a time (1 in flight), then as many pipelined (``--inflight``).
  Rounds alternate off / on. Reported per case: wall throughput, and CPU per message of the
  broker process (user + system from /proc, 10 ms ticks) and of this client process
  (getrusage). On a shared machine the CPU per message is the figure to compare; throughput
  moves with the other tenants. Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_common import (
    REPO,
    SMALL_STORE,
    Service,
    bench_root,
    loadavg,
    machine,
    own_cpu_seconds,
    send_bench_args,
    send_windowed,
)

sys.path.insert(0, str(REPO))
from sparkmq.broker.acl import AclValidator
from sparkmq.client.message import Message
from sparkmq.client.producer import AsyncProducer
from sparkmq.client.security import ClientSecurity
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.acl_signing import SessionCredentials

READY_TIMEOUT_S = 60.0
ACCOUNTS = """\
accounts:
  - accessKey: benchUser
    secretKey: benchSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - BenchAcl=PUB|SUB
      - TBW102=PUB
      - other1=SUB
      - other2=DENY
    groupPerms:
      - PID_bench=PUB|SUB
"""
CREDENTIALS = SessionCredentials("benchUser", "benchSecret")


def send_fields() -> dict[str, str]:
    """SEND_MESSAGE_V2 fields as a producer sends them (properties: UNIQ_KEY and WAIT)."""
    return {
        "a": "PID_bench",
        "b": "BenchAcl",
        "c": "TBW102",
        "d": "4",
        "e": "1",
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": "UNIQ_KEY\x017F0000010001B4AAC29C1A2B3C4D5E6F70\x02WAIT\x01true\x02",
        "j": "0",
        "k": "false",
        "l": "0",
        "m": "false",
    }


def per_call_us(action: object, calls: int) -> float:
    assert callable(action)
    start = time.process_time()
    for _ in range(calls):
        action()
    return (time.process_time() - start) / calls * 1e6


def micro(calls: int, tmp: Path) -> None:
    acl_file = tmp / "plain_acl.yml"
    acl_file.write_text(ACCOUNTS)
    validator = AclValidator(acl_file)
    body = os.urandom(100)
    fields = send_fields()
    signed = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=CREDENTIALS.sign(fields, body), body=body)
    unsigned = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=fields, body=body)
    validator.check(signed, "127.0.0.1")  # warm, and proves it passes
    print("## In-process, CPU µs per call")
    print(
        f"  broker AclValidator.check (signed SEND_MESSAGE_V2, 100 B): "
        f"{per_call_us(lambda: validator.check(signed, '127.0.0.1'), calls):.2f}"
    )
    print(
        f"  client SessionCredentials.sign (same fields and body):      "
        f"{per_call_us(lambda: CREDENTIALS.sign(fields, body), calls):.2f}"
    )
    print(
        f"  for scale, RemotingCommand.encode of the signed request:     "
        f"{per_call_us(signed.encode, calls):.2f} (unsigned {per_call_us(unsigned.encode, calls):.2f})"
    )


async def measure(
    producer: AsyncProducer, broker: Service, sends: int, inflight: int
) -> list[tuple[str, float, float, float]]:
    messages = [Message("BenchAcl", os.urandom(100)) for _ in range(sends)]
    await producer.send(Message("BenchAcl", b"warm"))  # route, connection, topic auto-creation
    rows = []
    for label, width in (("send x1, 1 in flight", 1), (f"send x1, {inflight} in flight", inflight)):
        broker_cpu, client_cpu, start = broker.cpu_seconds(), sum(own_cpu_seconds()), time.perf_counter()
        await send_windowed(producer.send, messages, width)
        wall = time.perf_counter() - start
        rows.append(
            (
                label,
                sends / wall,
                (broker.cpu_seconds() - broker_cpu) / sends * 1e6,
                (sum(own_cpu_seconds()) - client_cpu) / sends * 1e6,
            )
        )
    return rows


def end_to_end(acl: bool, sends: int, inflight: int, tmp: Path) -> list[tuple[str, float, float, float]]:
    store = Path(tempfile.mkdtemp(prefix="acl-bench-", dir=tmp))
    (store / "plain_acl.yml").write_text(ACCOUNTS)
    namesrv = Service(
        ["namesrv", "--host", "127.0.0.1", "--port", "0"], "namesrv listening on", timeout_s=READY_TIMEOUT_S
    )
    broker = None
    try:
        args = [
            "broker",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--namesrv",
            namesrv.address,
            "--store-dir",
            str(store / "store"),
            *SMALL_STORE,
            "--flush",
            "async",
            "--set",
            f"aclEnable={'true' if acl else 'false'}",
            "--set",
            f"aclFile={store / 'plain_acl.yml'}",
        ]
        broker = Service(args, "broker listening on", timeout_s=READY_TIMEOUT_S)

        async def run() -> list[tuple[str, float, float, float]]:
            security = ClientSecurity(CREDENTIALS) if acl else None
            producer = AsyncProducer("PID_bench", namesrv.address, security=security)
            await producer.start()
            try:
                return await measure(producer, broker, sends, inflight)
            finally:
                await producer.close()

        return asyncio.run(run())
    finally:
        if broker is not None:
            broker.stop()
        namesrv.stop()
        shutil.rmtree(store, ignore_errors=True)


def main() -> None:
    args = send_bench_args(__doc__)
    sends, rounds, calls = (500, 1, 5000) if args.quick else (args.sends, args.rounds, 50_000)
    print(" | ".join(f"{k}: {v}" for k, v in machine().items()))
    tmp = Path(tempfile.mkdtemp(prefix="acl-bench-", dir=bench_root()))
    try:
        micro(calls, tmp)
        print(f"\n## End to end, {sends} sends of 100 B per case, {rounds} round(s) alternating off / on")
        print(f"{'case':28} {'ACL':4} {'msgs/s':>9} {'broker µs/msg':>14} {'client µs/msg':>14}")
        for round_number in range(rounds):
            for acl in (False, True):
                for label, rate, broker_us, client_us in end_to_end(acl, sends, args.inflight, tmp):
                    print(
                        f"{label:28} {'on' if acl else 'off':4} {rate:9.0f} {broker_us:14.1f} {client_us:14.1f}"
                        f"   (round {round_number + 1}, load {loadavg()})"
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
