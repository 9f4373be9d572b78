"""The store cases of bench/references_bench.py: master/slave throughput and recovery after kill -9.

Apache RocketMQ 4.9.7 and sparkmq get the same broker.conf keys (``COMMON_BROKER_CONF``, 64 MiB CommitLog
segments) and the flush type of the run; Apache keeps its own defaults for everything else.

- ``ha_throughput``: a SYNC_MASTER and its SLAVE per side (Apache's slave learns its master's HA address from
  the NameServer; sparkmq's gets ``haMasterAddress``), then the Java client's sync single sends to the master
  (a SEND_OK waits for the slave's acknowledgement).
- ``recovery``: one broker per side takes GIB of batch sends (4 KiB bodies, 32 a batch), is killed with
  SIGKILL and started again on the same store; ``ready_s`` is the time from the start until it serves (Apache
  prints ``boot success``, sparkmq ``broker listening on``), ``first_ok_s`` until a fresh client's send and
  its pull both succeeded; the messages each kept are counted against the acknowledged ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from bench_common import cpu_seconds, producer_and_consumer
from sparkmq.client import Message
from sparkmq.errors import SparkmqError
from support.processes import BrokerProcess, NamesrvProcess
from support.reference_pair import SIDES
from support.rocketmq_java import (
    COMMON_BROKER_CONF,
    ApacheBroker,
    ApacheNamesrv,
    classpath,
    client_jvm,
    free_port,
)

FILL_BODY = 4096
FILL_BATCH = 32
WARMUP_S = 10
PROBE_TIMEOUT_S = 120.0


def client(namesrv: str, log_dir: Path, *args: object) -> dict[str, Any]:
    """One references/runner/ClientBench.java run against the cluster of ``namesrv``; its last JSON line."""
    log_dir.mkdir(parents=True, exist_ok=True)
    command = ["java", *client_jvm(log_dir), "-cp", classpath("runner", "rocketmq"), "ClientBench", namesrv]
    done = subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=900, cwd=log_dir)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"ClientBench {args} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return lines[-1]


def sparkmq_flags(conf: Mapping[str, str]) -> list[str]:
    """``sparkmq broker`` flags for the common keys plus ``conf``."""
    return [flag for key, value in {**COMMON_BROKER_CONF, **conf}.items() for flag in ("--set", f"{key}={value}")]


@contextlib.contextmanager
def namesrvs(root: Path) -> Iterator[dict[str, str]]:
    """One NameServer per side, stopped at exit: side -> address."""
    with ApacheNamesrv.start(root) as apache, NamesrvProcess.start() as ours:
        yield {"apache": apache.address, "sparkmq": ours.address}


def ha_throughput(root: Path, flush: str, threads: int, seconds: int, body: int) -> dict[str, dict[str, Any]]:
    """Sync single sends to a SYNC_MASTER with a linked SLAVE, Apache then sparkmq."""
    conf = {"flushDiskType": flush, "brokerRole": "SYNC_MASTER"}
    slave = {"flushDiskType": flush, "brokerRole": "SLAVE", "brokerId": "1"}
    ha_port = free_port()
    with namesrvs(root) as names, contextlib.ExitStack() as stack:
        master = stack.enter_context(ApacheBroker.start(root, names["apache"], conf=conf, name="apache-master"))
        replica = stack.enter_context(ApacheBroker.start(root, names["apache"], conf=slave, name="apache-slave"))
        pids = {"apache": (master.process.pid, replica.process.pid)}
        master_flags = sparkmq_flags({**conf, "haListenPort": str(ha_port)})
        ours = stack.enter_context(BrokerProcess.start(root / "sparkmq-master", names["sparkmq"], *master_flags))
        slave_conf = {**slave, "haMasterAddress": f"127.0.0.1:{ha_port}", "haListenPort": str(free_port())}
        slave_flags = sparkmq_flags(slave_conf)
        our_replica = stack.enter_context(BrokerProcess.start(root / "sparkmq-slave", names["sparkmq"], *slave_flags))
        pids["sparkmq"] = (ours.pid, our_replica.pid)
        for side in SIDES:  # the JIT, and the slave's link (SLAVE_NOT_AVAILABLE until then)
            client(names[side], root / f"client-{side}", "send", "HaWarm", threads, WARMUP_S, body, 1)
        results = {}
        for side in SIDES:
            before = [cpu_seconds(pid) for pid in pids[side]]
            results[side] = client(names[side], root / f"client-{side}", "send", "HaSingle", threads, seconds, body, 1)
            used = [cpu_seconds(pid) - cpu for pid, cpu in zip(pids[side], before, strict=True)]
            sent = max(results[side]["sent"], 1)
            results[side]["master_slave_cpu_us_per_msg"] = [round(cpu / sent * 1e6, 1) for cpu in used]
        return results


async def first_send_and_pull(namesrv: str, topic: str) -> int:
    """Fresh clients until a send to ``topic`` and the pull of what it stored succeed; the messages then stored."""
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    while True:
        try:
            async with producer_and_consumer(namesrv, "recovery_probe") as (producer, consumer):
                sent = await producer.send(Message(topic, b"probe"))
                pulled = await consumer.pull_raw(sent.queue, sent.queue_offset, 1)
                if pulled.found:
                    return sum([await consumer.max_offset(queue) for queue in await consumer.queues_of(topic)])
        except (SparkmqError, OSError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no send + pull succeeded on {namesrv} within {PROBE_TIMEOUT_S} s")
        await asyncio.sleep(0.05)


def recovery(root: Path, flush: str, gib: float) -> dict[str, dict[str, Any]]:
    """Fill, SIGKILL, start again on the same store, first successful send + pull: Apache, then sparkmq."""
    limit = int(gib * 2**30) // FILL_BODY
    results: dict[str, dict[str, Any]] = {}
    with namesrvs(root) as names:
        starts: dict[str, Callable[[], ApacheBroker | BrokerProcess]] = {
            "apache": lambda: ApacheBroker.start(root, names["apache"], conf={"flushDiskType": flush}),
            "sparkmq": lambda: BrokerProcess.start(
                root / "sparkmq-store", names["sparkmq"], *sparkmq_flags({"flushDiskType": flush})
            ),
        }
        for side in SIDES:
            broker = starts[side]()
            try:
                fill = client(
                    names[side], root / f"client-{side}", "send", "Recover", 2, 3600, FILL_BODY, FILL_BATCH, limit
                )
            finally:
                os.kill(broker.pid, signal.SIGKILL)
                broker.stop()  # reaps it
            started = time.perf_counter()
            with starts[side]():
                ready = time.perf_counter() - started
                stored = asyncio.run(first_send_and_pull(names[side], "Recover"))
                first_ok = time.perf_counter() - started
            acknowledged = fill["sent"] + 1  # + the send that fetched the route
            results[side] = {
                "ready_s": ready,
                "first_ok_s": first_ok,
                "acknowledged": acknowledged,
                "kept": stored - 1,  # - the probe
                "fill_msgs_per_s": fill["msgs_per_s"],
            }
    return results
