"""The RocketMQ 5 Python client (rocketmq-python-client 5.1.2, gRPC) against sparkmq and Apache RocketMQ 5.

    .venv/bin/python bench/grpc_client_bench.py [--count 2000] [--size 128] [--flush async|sync] [--only sparkmq]
        [--warmup N] [--held N] [--rounds N]

In one run, each side in turn: a sparkmq broker with its gRPC endpoint (``enableGrpcServer``), and Apache
RocketMQ 5.3's NameServer plus its proxy in ``proxyMode=local`` (the broker in the proxy's JVM; jars from
``make references``). Each gets the same client cases from bench/grpc_client_peer.py in .venv-rocketmq5
(``make rocketmq5-venv``): a warm-up pass on its own topic, then sequential sends and receive (batches of
32) + ack of each message. The server's CPU (user + system, all threads; the NameServer left out) is
counted over the measured pass only, per message sent or acked; bench/grpc_floor.py's empty grpc.aio
call, measured last, is what grpcio alone costs sparkmq per call. ``--held N``: then N more messages
received and held (invisible for 10 min), and acked one by one at the end (the acks with many in flight).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grpc_floor import floor_cpu_us

from bench_common import REPO, SMALL_STORE, Service, free_port, machine, print_machine, process_cpu, temp_root

sys.path.insert(0, str(REPO / "tests"))

from support.rocketmq_java import (  # noqa: E402
    COMMON_BROKER_CONF,
    HEAP,
    JDK17_OPENS,
    JVM_GC,
    JavaProcess,
    classpath,
    missing_references,
)

PEER_PYTHON = REPO / ".venv-rocketmq5" / "bin" / "python"
PEER = REPO / "bench" / "grpc_client_peer.py"
TOPIC, GROUP = "GrpcBench", "GrpcBenchGroup"
WARM_TOPIC, WARM_GROUP = "GrpcWarm", "GrpcWarmGroup"
APACHE = "rocketmq5"  # references/rocketmq5/pom.xml: rocketmq-proxy and rocketmq-namesrv 5.3.x


@contextlib.contextmanager
def sparkmq_side(root: Path, flush: str) -> Iterator[tuple[str, int]]:
    """A sparkmq broker serving gRPC: (endpoint, pid)."""
    port = free_port()
    broker = Service(
        ["broker", "--host", "127.0.0.1", "--port", "0", "--store-dir", str(root / "store"), "--flush", flush]
        + SMALL_STORE
        + ["--set", "enableGrpcServer=true", "--set", f"grpcServerPort={port}"],
        "broker listening on",
    )
    try:
        yield f"127.0.0.1:{port}", broker.process.pid
    finally:
        broker.stop()


def _apache_jvm(home: Path) -> list[str]:
    return [*HEAP, *JVM_GC, *JDK17_OPENS, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}"]


@contextlib.contextmanager
def apache_side(root: Path, flush: str) -> Iterator[tuple[str, int]]:
    """Apache's NameServer and proxy (proxyMode=local, the broker inside), the bench topics created: (endpoint, pid)."""
    home = root / "apache"
    home.mkdir()
    env = {"ROCKETMQ_HOME": str(home)}
    cp = classpath(APACHE)
    ns_port, broker_port, grpc_port, remoting_port = (free_port() for _ in range(4))
    namesrv_addr = f"127.0.0.1:{ns_port}"
    (home / "namesrv.conf").write_text(f"listenPort={ns_port}\n")
    settings = {
        **COMMON_BROKER_CONF,
        "listenPort": str(broker_port),
        "namesrvAddr": namesrv_addr,
        "storePathRootDir": str(home / "store"),
        "storePathCommitLog": str(home / "store" / "commitlog"),
        "flushDiskType": f"{flush.upper()}_FLUSH",
    }
    (home / "broker.conf").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    proxy = {"rocketMQClusterName": "DefaultCluster", "grpcServerPort": grpc_port, "namesrvAddr": namesrv_addr}
    (home / "proxy.json").write_text(json.dumps(proxy | {"remotingListenPort": remoting_port}))
    namesrv_args = [*_apache_jvm(home), "-cp", cp, "org.apache.rocketmq.namesrv.NamesrvStartup", "-c"]
    with JavaProcess.launch(
        [*namesrv_args, str(home / "namesrv.conf")], home, ("boot success", ns_port, "Apache NameServer"), env
    ):
        proxy_args = [*_apache_jvm(home), "-cp", cp, "org.apache.rocketmq.proxy.ProxyStartup", "-pm", "local"]
        proxy_args += ["-bc", str(home / "broker.conf"), "-pc", str(home / "proxy.json")]
        ready = ("startup successfully", grpc_port, "Apache proxy")
        with JavaProcess.launch(proxy_args, home, ready, env) as server:
            admin = [*_apache_jvm(home), "-cp", cp, "org.apache.rocketmq.tools.command.MQAdminStartup"]
            for topic in (WARM_TOPIC, TOPIC):
                created = subprocess.run(
                    ["java", *admin, "updateTopic", "-n", namesrv_addr, "-b", f"127.0.0.1:{broker_port}"]
                    + ["-t", topic, "-r", "4", "-w", "4"],
                    env=env,
                    cwd=home,
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=120,
                )
                if "success" not in created.stdout:
                    raise RuntimeError(f"Apache's mqadmin did not create {topic}:\n{created.stdout}{created.stderr}")
            yield f"127.0.0.1:{grpc_port}", server.pid


def peer(endpoint: str, topic: str, group: str, count: int, size: int, cwd: Path, held: int = 0) -> dict[str, Any]:
    """One bench/grpc_client_peer.py pass; its figures."""
    run = subprocess.run(
        [str(PEER_PYTHON), str(PEER), endpoint, topic, group, "--count", str(count), "--size", str(size)]
        + ["--held", str(held)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=cwd,
    )
    if run.returncode != 0:
        raise RuntimeError(f"the client against {endpoint} failed:\n{run.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return figures


def measure(side: Any, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The warm-up pass, then the measured one with the server's CPU over it."""
    with side(root, args.flush) as (endpoint, pid):
        peer(endpoint, WARM_TOPIC, WARM_GROUP, args.count if args.warmup is None else args.warmup, args.size, root)
        user0, sys0 = process_cpu(pid)
        figures = peer(endpoint, TOPIC, GROUP, args.count, args.size, root, args.held)
        user1, sys1 = process_cpu(pid)
    operations = figures["sent"] + figures["received"] + 2 * figures["held"]
    figures["cpu_us"] = (user1 - user0 + sys1 - sys0) / operations * 1e6
    figures["cpu_sys_us"] = (sys1 - sys0) / operations * 1e6
    return figures


ROWS = (
    ("send msg/s", "send_per_s", True),
    ("send p50 µs", "send_p50_us", False),
    ("send p99 µs", "send_p99_us", False),
    ("receive+ack msg/s", "receive_ack_per_s", True),
    ("ack p50 µs", "ack_p50_us", False),
    ("ack p99 µs", "ack_p99_us", False),
    ("server CPU µs/msg", "cpu_us", False),
    ("  of which system", "cpu_sys_us", False),
    ("acks, many held /s", "held_ack_per_s", True),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--flush", choices=("async", "sync"), default="async")
    parser.add_argument("--held", type=int, default=0, help="then N received and held, acked at the end")
    parser.add_argument("--warmup", type=int, help="messages of the warm-up pass (default: --count; the JIT's)")
    parser.add_argument("--only", choices=("sparkmq", "apache"), help="one side alone")
    parser.add_argument("--rounds", type=int, default=1, help="the sides in turn this many times; medians shown")
    args = parser.parse_args()
    if not PEER_PYTHON.exists():
        raise SystemExit(f"{PEER_PYTHON} is missing: run `make rocketmq5-venv`")
    sides = {"sparkmq": sparkmq_side, "apache": apache_side}
    if args.only:
        sides = {args.only: sides[args.only]}
    if "apache" in sides and missing_references(APACHE):
        raise SystemExit(f"{missing_references(APACHE)} is missing: run `make references`")
    info = machine()
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, side in sides.items():
            with temp_root(f"grpc-bench-{name}-") as root:
                rounds[name].append(measure(side, root, args))
    results = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for name, runs in rounds.items()}
    if args.rounds > 1:
        for name, runs in rounds.items():
            each = ", ".join(f"{r['send_per_s']:.0f}/{r['receive_ack_per_s']:.0f}/{r['ack_p99_us']:.0f}" for r in runs)
            print(f"{name} by round (send msg/s / receive+ack msg/s / ack p99 µs): {each}")
        print(f"medians of {args.rounds} rounds:")
    print(f"flush {args.flush}, {args.count} x {args.size} B, receive batches of 32, one ack per message")
    names = list(results)
    header = "".join(f"{n:>12}" for n in names) + ("   sparkmq/apache" if len(names) == 2 else "")
    print(f"{'':20}{header}")
    for label, key, higher_better in ROWS:
        if key == "held_ack_per_s" and not args.held:
            continue
        values = [results[n][key] for n in names]
        line = f"{label:20}" + "".join(f"{v:12.0f}" for v in values)
        if len(values) == 2 and values[1]:
            ratio = values[0] / values[1]
            line += f"   {ratio:6.2f}x" + ("" if higher_better else " (lower is better)")
        print(line)
    if "sparkmq" in results:
        print(f"grpcio's own server CPU per empty unary call (bench/grpc_floor.py): {floor_cpu_us(args.count):.0f} µs")
    print_machine(info)


if __name__ == "__main__":
    main()
