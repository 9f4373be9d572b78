"""Fixtures for interop tests: one NameServer + one broker per module, C++ client subprocesses per test."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkmq.protocol.codes import RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient
from support.processes import BrokerProcess, NamesrvProcess
from support.rocketmq_cpp import CppClientRun, require_cpp_python

CLIENT_TIMEOUT_S = 90.0  # hard cap on any one C++ client subprocess


@dataclass
class Cluster:
    """The module's NameServer and broker, plus read-only questions to the broker."""

    namesrv: NamesrvProcess
    broker: BrokerProcess

    def ask(self, code: int, **ext: object) -> tuple[dict[str, str], bytes]:
        """One request to the broker over our own RemotingClient; SUCCESS expected."""

        async def call() -> tuple[int, str | None, dict[str, str], bytes]:
            client = RemotingClient()
            try:
                response = await client.invoke(self.broker.address, code, {k: str(v) for k, v in ext.items()})
            finally:
                await client.close()
            return response.code, response.remark, response.ext_fields, response.body

        status, remark, fields, body = asyncio.run(call())
        assert status == ResponseCode.SUCCESS, f"request {code} {ext} answered {status} {remark}"
        return fields, body

    def max_offset(self, topic: str, queue_id: int) -> int:
        fields, _ = self.ask(RequestCode.GET_MAX_OFFSET, topic=topic, queueId=queue_id)
        return int(fields["offset"])

    def min_offset(self, topic: str, queue_id: int) -> int:
        fields, _ = self.ask(RequestCode.GET_MIN_OFFSET, topic=topic, queueId=queue_id)
        return int(fields["offset"])

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        fields, _ = self.ask(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=topic, queueId=queue_id)
        return int(fields["offset"])

    def consumer_ids(self, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP; [] when the broker knows no consumer of ``group``."""

        async def call() -> tuple[int, bytes]:
            client = RemotingClient()
            try:
                response = await client.invoke(
                    self.broker.address, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}
                )
            finally:
                await client.close()
            return response.code, response.body

        status, body = asyncio.run(call())
        if status != ResponseCode.SUCCESS or not body:
            return []
        return list(json.loads(body)["consumerIdList"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_cpp_python()
    store = tmp_path_factory.mktemp("interop-store")
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address) as broker:
        yield Cluster(namesrv, broker)


class CppClients:
    """Starts driver subprocesses for one test; every one is killed and reaped at teardown."""

    def __init__(self, cluster: Cluster, home: Path) -> None:
        self.cluster = cluster
        self.home = home
        self.runs: list[CppClientRun] = []

    def start(self, command: str, *, topic: str, group: str, home: str = "home", **options: object) -> CppClientRun:
        """``cpp_client.py COMMAND --topic T --group G --opt value ...`` (True → bare flag).

        Each ``home`` is a separate $HOME: BROADCASTING consumers keep their offsets there.
        """
        args = [command, "--namesrv", self.cluster.namesrv.address, "--topic", topic, "--group", group]
        for name, value in options.items():
            flag = "--" + name.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is not False:
                args += [flag, str(value)]
        run = CppClientRun.start(self.home / home, *args)
        self.runs.append(run)
        return run

    def run(
        self, command: str, *, topic: str, group: str, timeout_s: float = CLIENT_TIMEOUT_S, **options: object
    ) -> list[dict[str, object]]:
        """Start, wait for a clean exit, return the records."""
        return self.start(command, topic=topic, group=group, **options).finish(timeout_s)

    def close(self) -> None:
        for run in self.runs:
            run.kill()


@pytest.fixture
def cpp(cluster: Cluster, tmp_path: Path) -> Iterator[CppClients]:
    clients = CppClients(cluster, tmp_path)
    logged = len(cluster.broker.output)
    try:
        yield clients
    finally:
        clients.close()
        # Captured output: pytest shows it only when the test fails.
        print("broker output during this test:", *cluster.broker.output[logged:][-60:], sep="\n  ")


@pytest.fixture
def topic() -> str:
    """A fresh topic name per test (the broker auto-creates it on first send)."""
    return f"Interop_{uuid.uuid4().hex[:12]}"
