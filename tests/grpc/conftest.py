"""tests/grpc: one NameServer and one SYNC-flush broker with its gRPC endpoint for the package (``grpc_broker``);
each module works on topics and groups of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.grpc_broker import GrpcBroker, start_broker
from support.processes import NamesrvProcess


@pytest.fixture(scope="package")
def grpc_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcBroker]:
    namesrv = NamesrvProcess.start()
    store = tmp_path_factory.mktemp("grpc-broker")
    try:
        cluster = GrpcBroker(store, namesrv, start_broker(store, namesrv.address))
        try:
            yield cluster
        finally:
            cluster.broker.stop()
    finally:
        namesrv.stop()
