"""Many-clients benchmark: N producer processes sending single messages at once, aggregate msgs/s.

Run from the repo root::

    .venv/bin/python bench/client_fanin_bench.py --quick              # 8 processes, 500 sends each
    .venv/bin/python bench/client_fanin_bench.py --processes 8 --sends 5000

Against one fresh ``sparkmq dev`` (ASYNC flush), ``--processes`` (8) processes of each client
send ``--sends`` 100 B messages each to one 4-queue topic:

* ``rocketmq C++ 0.4.4, sync``: the real RocketMQ C++ client (PyPI ``rocketmq``, the
  ``.venv-rocketmq`` virtualenv tests/interop uses), ``Producer.send_sync`` one at a time;
* ``sparkmq AsyncProducer, 1 in flight`` and ``…, 128 in flight``: sparkmq's own producer;
* beside them, when the peers' virtualenv (``../shared/peers/setup.sh``: nats-py) and
  ``nats-server`` are installed, a JetStream server (file storage) and the same number of
  nats-py processes: ``js.publish`` one at a time, and the peers' ``raw`` style (core publish
  with a reply inbox, 128 acknowledgements outstanding).

Every worker connects and warms up, then all are released together; the aggregate is all
messages over the wall time from release to the last worker's end. CPU columns: the server
process's (/proc) and the workers' own from release to their end (getrusage, summed), per message.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from client_peers import add_peers_python_argument

from bench_common import (
    CLOCK_TICKS,
    REPO,
    DevProcess,
    add_loop_argument,
    free_port,
    machine,
    print_machine,
    temp_root,
)

CPP_PYTHON = REPO / ".venv-rocketmq" / "bin" / "python"
CPP_PYTHON_SHARED = REPO.parent / "main" / ".venv-rocketmq" / "bin" / "python"
READY_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 600.0

_RESULT = """
import json, resource

def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime

def report(sent, seconds, cpu_at_start):
    print(json.dumps({"sent": sent, "seconds": seconds, "cpu": cpu() - cpu_at_start}), flush=True)
"""
CPP_WORKER = (
    _RESULT
    + """
import sys, time
from rocketmq.client import Message, Producer
namesrv, topic, group, count, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
producer = Producer(group)
producer.set_namesrv_addr(namesrv)
producer.start()
body = "x" * size  # the wrapper sends C strings: text bodies only

def message():
    m = Message(topic)
    m.set_body(body)
    return m

for _ in range(10):
    producer.send_sync(message())
print("ready", flush=True)
sys.stdin.readline()
cpu_at_start, started = cpu(), time.perf_counter()
for _ in range(count):
    producer.send_sync(message())
report(count, time.perf_counter() - started, cpu_at_start)
producer.shutdown()
"""
)
SPARKMQ_WORKER = (
    _RESULT
    + """
import asyncio, sys, time
from sparkmq.client import AsyncProducer, Message
namesrv, topic, group = sys.argv[1:4]
count, size, inflight = (int(a) for a in sys.argv[4:7])
uvloop = sys.argv[7] == "uvloop"

async def main():
    producer = AsyncProducer(group, namesrv, send_timeout_s=30.0)
    await producer.start()
    messages = [Message(topic, b"x" * size) for _ in range(count)]
    for m in messages[:10]:
        await producer.send(m)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    items = iter(messages)

    async def worker():
        for m in items:
            await producer.send(m)

    cpu_at_start, started = cpu(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    report(count, time.perf_counter() - started, cpu_at_start)
    await producer.close()

if uvloop:
    import uvloop as _uvloop
    _uvloop.run(main())
else:
    asyncio.run(main())
"""
)
NATS_WORKER = (
    _RESULT
    + """
import asyncio, sys, time
import nats
from nats.js.api import StorageType, StreamConfig
url, subject, count, size, inflight = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

async def main():
    nc = await nats.connect(url, pending_size=64 * 1024 * 1024)
    js = nc.jetstream()
    body = b"x" * size
    for _ in range(10):
        await js.publish(subject, body)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    cpu_at_start, started = cpu(), time.perf_counter()
    if inflight == 1:
        for _ in range(count):
            await js.publish(subject, body)
    else:  # the peers' raw style: core publish with a reply inbox, acknowledgements counted
        window, done, acks = asyncio.Semaphore(inflight), asyncio.get_running_loop().create_future(), [0]

        async def on_ack(msg):
            acks[0] += 1
            window.release()
            if acks[0] == count and not done.done():
                done.set_result(True)

        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=on_ack, pending_msgs_limit=4 * inflight + 1000)
        for _ in range(count):
            await window.acquire()
            await nc.publish(subject, body, reply=inbox)
        await asyncio.wait_for(done, 120)
    report(count, time.perf_counter() - started, cpu_at_start)
    await nc.close()

asyncio.run(main())
"""
)
NATS_STREAM = """
import asyncio, sys
import nats
from nats.js.api import StorageType, StreamConfig

async def main():
    nc = await nats.connect(sys.argv[1])
    await nc.jetstream().add_stream(StreamConfig(name="FANIN", subjects=["fanin.>"], storage=StorageType.FILE))
    await nc.close()

asyncio.run(main())
"""


@dataclass
class FanInRow:
    """One client kind with N processes."""

    case: str
    processes: int
    messages: int
    seconds: float
    server_cpu_s: float
    client_cpu_s: float
    slowest_worker_s: float

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def run_workers(case: str, commands: list[list[str]], env: dict[str, str], server_pid: int, cwd: Path) -> FanInRow:
    """Start every worker, wait until all are ready, release them together, collect their reports."""
    lines: queue.Queue[tuple[int, str]] = queue.Queue()
    workers = [
        subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=cwd,
        )
        for command in commands
    ]

    def pump(index: int, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put((index, line.strip()))
        lines.put((index, "<exit>"))

    for index, process in enumerate(workers):
        threading.Thread(target=pump, args=(index, process), daemon=True).start()
    try:
        _await_lines(lines, len(workers), "ready", READY_TIMEOUT_S, case)
        cpu_before, started = process_cpu_seconds(server_pid), time.perf_counter()
        for process in workers:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        reports = [json.loads(line) for line in _await_lines(lines, len(workers), "{", RUN_TIMEOUT_S, case)]
        seconds = time.perf_counter() - started
        return FanInRow(
            case,
            len(workers),
            sum(r["sent"] for r in reports),
            seconds,
            process_cpu_seconds(server_pid) - cpu_before,
            sum(r["cpu"] for r in reports),
            max(r["seconds"] for r in reports),
        )
    finally:
        for process in workers:
            if process.poll() is None:
                process.kill()
            process.wait()


def _await_lines(
    lines: queue.Queue[tuple[int, str]], count: int, prefix: str, timeout_s: float, case: str
) -> list[str]:
    got: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        try:
            index, line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"{case}: {len(got)} of {count} workers said {prefix!r} within {timeout_s} s") from None
        if line == "<exit>" and index not in got:
            raise RuntimeError(f"{case}: worker {index} exited before saying {prefix!r}")
        if line.startswith(prefix):
            got[index] = line
    return list(got.values())


def cpp_python() -> Path | None:
    return next((p for p in (CPP_PYTHON, CPP_PYTHON_SHARED) if p.exists()), None)


def sparkmq_cases(root: Path, processes: int, sends: int, size: int, loop: str) -> list[FanInRow]:
    rows: list[FanInRow] = []
    dev = DevProcess(root / "store")
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        python = cpp_python()
        if python is None:
            print("(no .venv-rocketmq: the C++ client rows are skipped)", file=sys.stderr)
        else:
            cpp_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
            home = root / "cpp-home"
            home.mkdir()
            cpp_env["HOME"] = str(home)  # the C++ library logs under $HOME/logs
            commands = [
                [str(python), "-c", CPP_WORKER, dev.namesrv, "FanInCpp", f"PID_FANIN_CPP_{i}", str(sends), str(size)]
                for i in range(processes)
            ]
            rows.append(report(run_workers("rocketmq C++ 0.4.4, sync", commands, cpp_env, dev.process.pid, home)))
        for inflight in (1, 128):
            commands = [
                [
                    sys.executable,
                    "-c",
                    SPARKMQ_WORKER,
                    dev.namesrv,
                    "FanInSparkmq",
                    f"PID_FANIN_{i}",
                    str(sends),
                    str(size),
                    str(inflight),
                    loop,
                ]
                for i in range(processes)
            ]
            label = f"sparkmq AsyncProducer, {inflight} in flight" + (", uvloop" if loop == "uvloop" else "")
            rows.append(report(run_workers(label, commands, env, dev.process.pid, REPO)))
    finally:
        dev.stop()
    return rows


def nats_cases(root: Path, processes: int, sends: int, size: int, peers_python: Path) -> list[FanInRow]:
    server = shutil.which("nats-server")
    if server is None or not peers_python.exists():
        print(
            f"(no nats-server on PATH or no {peers_python}: run ../shared/peers/setup.sh; NATS rows skipped)",
            file=sys.stderr,
        )
        return []
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    nats = subprocess.Popen(
        [server, "-js", "-sd", str(root / "nats"), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        for _ in range(100):  # until it listens
            if (
                subprocess.run(
                    [str(peers_python), "-c", NATS_STREAM, url], env=env, capture_output=True, check=False
                ).returncode
                == 0
            ):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("nats-server did not accept the stream")
        rows = []
        for inflight, label in ((1, "nats-py js.publish, sync"), (128, "nats-py raw publish, 128 in flight")):
            commands = [
                [str(peers_python), "-c", NATS_WORKER, url, f"fanin.{i}", str(sends), str(size), str(inflight)]
                for i in range(processes)
            ]
            rows.append(report(run_workers(label, commands, env, nats.pid, root)))
        return rows
    finally:
        nats.terminate()
        nats.wait(30)


def report(row: FanInRow) -> FanInRow:
    print(f"  {row.case:<40} {row.processes} procs {row.msgs_per_s:>10,.0f} msgs/s", file=sys.stderr, flush=True)
    return row


def fanin_table(rows: list[FanInRow]) -> str:
    lines = [
        "| client | processes | messages | seconds | aggregate msgs/s | server CPU µs/msg | clients' CPU µs/msg |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.case} | {r.processes} | {r.messages:,} | {r.seconds:.2f} | **{r.msgs_per_s:,.0f}** | "
            f"{r.server_cpu_s / r.messages * 1e6:.1f} | {r.client_cpu_s / r.messages * 1e6:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8, help="producer processes per client kind (default 8)")
    parser.add_argument("--sends", type=int, default=5_000, help="messages per process (default 5,000)")
    parser.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    parser.add_argument("--quick", action="store_true", help="500 messages per process")
    parser.add_argument("--no-peers", action="store_true", help="skip NATS")
    add_loop_argument(parser, "the event loop of sparkmq's worker processes (default asyncio)")
    add_peers_python_argument(parser, ", with nats-py")
    args = parser.parse_args(argv)
    sends = 500 if args.quick else args.sends
    info = machine()
    with temp_root("sparkmq-client-fanin-bench-") as root:
        rows = sparkmq_cases(root, args.processes, sends, args.size, args.loop)
        if not args.no_peers:
            rows += nats_cases(root, args.processes, sends, args.size, args.peers_python)
    print_machine(info)
    print(f"\n## {args.processes} producer processes at once, {args.size} B single sends\n\n" + fanin_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
