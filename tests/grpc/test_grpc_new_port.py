"""A broker restarted after kill -9 with its remoting and gRPC endpoints on other ports: the real 5.1.2 Python
client, given the new gRPC endpoint, routes, sends and receives there (what was stored before included), and
the NameServer routes remoting clients to the new address only.

With ``proxyMode=LOCAL`` QueryRoute answers the endpoints the client asked on (as Apache RocketMQ's
proxy does) and the broker's own topic table: nothing of the old ports is kept to go stale.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkmq.protocol.codes import RequestCode, ResponseCode
from support.grpc_broker import GrpcBroker, listen_port
from support.processes import wait_until
from support.rocketmq5 import all_sent, finished, name_maker, of, require_rmq5_python, run5

names = name_maker("Moved")


@pytest.fixture(scope="module", autouse=True)
def rmq5_python() -> None:
    require_rmq5_python()


def _namesrv_addresses(grpc_broker: GrpcBroker, topic: str) -> set[str]:
    assert grpc_broker.namesrv is not None
    code, _, _, body = grpc_broker.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, address=grpc_broker.namesrv.address, topic=topic
    )
    if code != ResponseCode.SUCCESS:
        return set()
    return {a for b in json.loads(body)["brokerDatas"] for a in b["brokerAddrs"].values()}


def test_a_restart_on_new_ports_is_routed_to_by_the_client_and_the_namesrv(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    topic, group = names("Topic")
    grpc_broker.create_topic(topic, queues=1)
    [before] = grpc_broker.send(topic, 1)
    old_endpoint, old_address = grpc_broker.endpoint, grpc_broker.broker.address
    assert wait_until(lambda: _namesrv_addresses(grpc_broker, topic) == {old_address})
    grpc_broker.broker.kill()
    grpc_broker.start(grpc_port=listen_port())
    assert (grpc_broker.endpoint, grpc_broker.broker.address) != (old_endpoint, old_address)
    sent = all_sent(finished(run5(tmp_path, "produce", grpc_broker.endpoint, topic, "1")), 1)
    records = finished(run5(tmp_path, "receive", grpc_broker.endpoint, topic, group, "2"))
    assert sorted(r["id"] for r in of(records, "received")) == sorted([before["id"], sent[0]["id"]])
    assert wait_until(lambda: _namesrv_addresses(grpc_broker, topic) == {grpc_broker.broker.address})
