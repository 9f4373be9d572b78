"""Fixtures for tests of sparkmq's own clients: one NameServer + broker per module, clients per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.client_harness import Clients, create_topic, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

# Retries come back after 1 s instead of 10 s (delay level 3 + reconsume times), keeping tests short.
FAST_RETRIES = "messageDelayLevel=" + " ".join(["1s"] * 18)


@dataclass
class Cluster:
    """The module's NameServer and one broker (``broker-a``)."""

    namesrv: NamesrvProcess
    broker: BrokerProcess

    @property
    def ns(self) -> str:
        return self.namesrv.address

    def topic(self, queues: int = 4, prefix: str = "T") -> str:
        """A fresh topic with ``queues`` queues, routed by the NameServer."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        create_topic([self.broker.address], name, queues)
        wait_for_route(self.ns, name, {"broker-a"})
        return name


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    store = tmp_path_factory.mktemp("client-store")
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(store, namesrv.address, "--set", FAST_RETRIES) as broker,
    ):
        yield Cluster(namesrv, broker)


@pytest.fixture
def clients() -> Iterator[Clients]:
    opened = Clients()
    try:
        yield opened
    finally:
        opened.close_all()


@pytest.fixture
def group() -> str:
    """A fresh consumer group name."""
    return f"CID_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def offset_dir(tmp_path: Path) -> Path:
    """Where BROADCASTING consumers keep their local offsets (never $HOME in tests)."""
    return tmp_path / "offsets"
