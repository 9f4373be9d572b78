"""One NameServer + broker (Prometheus exporter on) per test module, for the operator tools' tests."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from support.client_harness import Clients, create_topic, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class OpsCluster:
    """The module's NameServer and broker ``broker-a``; ``metrics_port`` serves /metrics."""

    namesrv: NamesrvProcess
    broker: BrokerProcess
    metrics_port: int

    @property
    def ns(self) -> str:
        return self.namesrv.address

    def topic(self, queues: int = 4) -> str:
        name = f"T_{uuid.uuid4().hex[:10]}"
        create_topic([self.broker.address], name, queues)
        wait_for_route(self.ns, name, {"broker-a"})
        return name


@pytest.fixture(scope="module")
def ops_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpsCluster]:
    store = tmp_path_factory.mktemp("ops-store")
    port = free_port()
    metrics = (
        "--set",
        "metricsExporterType=PROM",
        "--set",
        "metricsPromExporterHost=127.0.0.1",
        "--set",
        f"metricsPromExporterPort={port}",
    )
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address, *metrics) as broker:
        yield OpsCluster(namesrv, broker, port)


@pytest.fixture
def clients() -> Iterator[Clients]:
    opened = Clients()
    try:
        yield opened
    finally:
        opened.close_all()
