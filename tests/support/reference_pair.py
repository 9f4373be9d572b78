"""Apache RocketMQ 4.9.x and sparkmq side by side, driven by the same official Java client.

A test module starts one pair (an Apache NameServer + broker, a sparkmq NameServer + broker, same broker.conf
keys) and runs its scripted scenarios against both at once; the tests compare what the client saw.
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from support.processes import BrokerProcess, NamesrvProcess, ServiceProcess
from support.rocketmq_java import (
    COMMON_BROKER_CONF,
    ApacheBroker,
    ApacheNamesrv,
    JavaProcess,
    Record,
    free_port,
    require_references,
    run_scenarios,
)

SIDES = ("apache", "sparkmq")
P = TypeVar("P", bound="JavaProcess | ServiceProcess")


@dataclass
class BrokerPair:
    """The two clusters under comparison, by side name."""

    namesrvs: dict[str, str]
    brokers: dict[str, str]
    root: Path
    broker_pids: dict[str, int]

    def run(
        self, prefix: str, scenarios: Sequence[str], credentials: tuple[str, str] | None = None
    ) -> dict[str, dict[str, list[Record]]]:
        """ScenarioRunner against both sides at once: side -> scenario -> its records."""
        with ThreadPoolExecutor(2) as pool:
            futures = {
                side: pool.submit(
                    run_scenarios, self.namesrvs[side], prefix, scenarios, self.root / f"client-{side}", credentials
                )
                for side in SIDES
            }
            results = {side: future.result() for side, future in futures.items()}
        return {side: by_scenario(records) for side, records in results.items()}


def by_scenario(records: list[Record]) -> dict[str, list[Record]]:
    grouped: dict[str, list[Record]] = {}
    for record in records:
        grouped.setdefault(record["scenario"], []).append(record)
    return grouped


@contextlib.contextmanager
def broker_pair(root: Path, conf: Mapping[str, str] | None = None, acl: str | None = None) -> Iterator[BrokerPair]:
    """Both clusters with ``COMMON_BROKER_CONF`` plus ``conf``, started concurrently, stopped at exit.

    ``acl``: the plain_acl.yml both brokers enforce.
    """
    require_references("rocketmq", "runner")
    settings = {**COMMON_BROKER_CONF, **(conf or {})}
    if acl is not None:
        root.mkdir(parents=True, exist_ok=True)
        (root / "plain_acl.yml").write_text(acl)
        settings.update(aclEnable="true", aclFile=str(root / "plain_acl.yml"))
        conf = {**(conf or {}), "aclEnable": "true"}
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(1) as pool:

        def apache() -> tuple[ApacheNamesrv, ApacheBroker]:
            namesrv = stack.enter_context(ApacheNamesrv.start(root))
            return namesrv, stack.enter_context(ApacheBroker.start(root, namesrv.address, conf=conf, acl=acl))

        started = pool.submit(apache)
        namesrv = stack.enter_context(NamesrvProcess.start())
        broker = stack.enter_context(BrokerProcess.start(root / "sparkmq-store", namesrv.address, *_flags(settings)))
        apache_namesrv, apache_broker = started.result()
        yield BrokerPair(
            {"apache": apache_namesrv.address, "sparkmq": namesrv.address},
            {"apache": apache_broker.address, "sparkmq": broker.address},
            root,
            {"apache": apache_broker.pid, "sparkmq": broker.pid},
        )


@dataclass
class ReplicatedPair(BrokerPair):
    """Per side a SYNC_MASTER (``brokers``) and its SLAVE (``slaves``), each side with its own NameServer."""

    slaves: dict[str, str]
    masters: dict[str, ApacheBroker | BrokerProcess]

    def kill_masters(self) -> None:
        """SIGKILL both masters and reap them."""
        for master in self.masters.values():
            master.process.send_signal(signal.SIGKILL)
            master.process.wait()


@contextlib.contextmanager
def replicated_pair(root: Path) -> Iterator[ReplicatedPair]:
    """Both clusters as a SYNC_MASTER and a SLAVE with ``COMMON_BROKER_CONF`` and the default read settings;
    each slave learns its master's HA address from the NameServer. Started concurrently; killed at exit (the
    stores are thrown away, and Apache's slave takes seconds over a graceful stop)."""
    require_references("rocketmq", "runner")
    roles = {"master": {"brokerRole": "SYNC_MASTER"}, "slave": {"brokerRole": "SLAVE", "brokerId": "1"}}
    processes: list[JavaProcess | ServiceProcess] = []

    def started(process: P) -> P:
        processes.append(process)
        return process

    def broker(side: str, role: str, namesrv: Future[ApacheNamesrv | NamesrvProcess]) -> ApacheBroker | BrokerProcess:
        address = namesrv.result().address
        if side == "apache":
            return started(ApacheBroker.start(root, address, conf=roles[role], name=f"apache-{role}"))
        flags = _flags({**COMMON_BROKER_CONF, **roles[role], "haListenPort": str(free_port())})
        return started(BrokerProcess.start(root / f"sparkmq-{role}", address, *flags))

    try:
        with ThreadPoolExecutor(6) as pool:
            namesrvs: dict[str, Future[ApacheNamesrv | NamesrvProcess]] = {
                "apache": pool.submit(lambda: started(ApacheNamesrv.start(root))),
                "sparkmq": pool.submit(lambda: started(NamesrvProcess.start())),
            }
            brokers = {
                (side, role): pool.submit(broker, side, role, namesrvs[side]) for side in SIDES for role in roles
            }
        masters = {side: brokers[side, "master"].result() for side in SIDES}
        yield ReplicatedPair(
            {side: namesrvs[side].result().address for side in SIDES},
            {side: masters[side].address for side in SIDES},
            root,
            {side: masters[side].pid for side in SIDES},
            {side: brokers[side, "slave"].result().address for side in SIDES},
            masters,
        )
    finally:
        for process in processes:
            process.process.kill()
            process.stop()


def _flags(settings: Mapping[str, str]) -> list[str]:
    """``sparkmq broker`` flags setting ``settings``."""
    return [flag for key, value in settings.items() for flag in ("--set", f"{key}={value}")]


# What differs on purpose or by a documented gap (docs/compatibility.md), removed before comparing.
# Apache adds CLUSTER to every stored message and strips WAIT from single sends; sparkmq stores the
# producer's properties as sent. A message the schedule delivered (REAL_TOPIC set: delayed, retried,
# dead-lettered) keeps DELAY on Apache; sparkmq removes it.
STORED_PROPERTIES_APACHE_ONLY = {"CLUSTER", "WAIT"}
BROKER_ADDRESS = re.compile(r"BROKER: \S+")


def comparable(value: Any) -> Any:
    """``value`` without the documented differences and the addresses that differ between any two runs."""
    if isinstance(value, dict):
        out = {key: comparable(item) for key, item in value.items()}
        props = out.get("properties")
        if isinstance(props, dict):
            props = {k: v for k, v in props.items() if k not in STORED_PROPERTIES_APACHE_ONLY}
            if "REAL_TOPIC" in props:
                props.pop("DELAY", None)
                out.pop("delayLevel", None)
            out["properties"] = props
        return out
    if isinstance(value, list):
        return [comparable(item) for item in value]
    if isinstance(value, str):
        return BROKER_ADDRESS.sub("BROKER: <addr>", value)
    return value
