"""Hostile peers against real ``sparkmq broker`` and ``sparkmq namesrv`` processes, over TCP only.

One NameServer and one broker serve the whole module; the broker runs with short limits
(idle 1 s, frame deadline 0.5 s, 500 connections). Each test checks what the hostile peer sees,
and that a healthy client's messages still go in and come back out, nothing acknowledged lost.
"""

from __future__ import annotations

import asyncio
import resource
import selectors
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader, RegisterBrokerRequestHeader
from sparkmq.protocol.bodies import TopicRouteData
from sparkmq.protocol.headers import PullMessageRequestHeader
from sparkmq.remoting import RemotingClient
from support.hostile import HealthyClient, RawPeer, raw_frame, raw_request
from support.processes import BrokerProcess, NamesrvProcess, wait_until

MAX_CONNECTIONS = 500
IDLE_CONNECTIONS = 1000
BROKER_NAME = "broker-hostile"


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NamesrvProcess, BrokerProcess]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * IDLE_CONNECTIONS:  # this process holds 1,000 sockets at once
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * IDLE_CONNECTIONS), hard))
    store: Path = tmp_path_factory.mktemp("hostile-store")
    with NamesrvProcess.start() as namesrv:
        limits = [
            "serverChannelMaxIdleTimeSeconds=1",
            "serverFrameDeadlineSeconds=0.5",
            f"serverMaxConnections={MAX_CONNECTIONS}",
            f"brokerName={BROKER_NAME}",
        ]
        with BrokerProcess.start(store, namesrv.address, *[a for kv in limits for a in ("--set", kv)]) as broker:
            yield namesrv, broker


def run(main: Callable[[RemotingClient], Awaitable[None]]) -> None:
    async def wrapper() -> None:
        client = RemotingClient()
        try:
            await main(client)
        finally:
            await client.close()

    asyncio.run(wrapper())


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_reader_that_never_reads_stops_being_read_and_costs_bounded_memory(services) -> None:
    _namesrv, broker = services

    async def main(client: RemotingClient) -> None:
        healthy = HealthyClient(client, broker.address, "NonReaderTopic")
        for i in range(16):  # 16 x 64 KiB: each pull below answers ~1 MiB
            await healthy.round_trip(f"warm-{i}-" + "x" * 65536)
        before = rss_bytes(broker.pid)
        pull = PullMessageRequestHeader("hostile", "NonReaderTopic", 0, 0, 32, 0, 0, 0, 0).to_fields()
        hostile = socket.create_connection(("127.0.0.1", broker.port))
        hostile.setblocking(False)
        frames, written = 0, 0
        try:
            # Pipeline pulls and never read: once the broker stops reading, our send buffer fills.
            while True:
                frame = raw_request(RequestCode.PULL_MESSAGE, frames, pull)
                try:
                    sent = hostile.send(frame)
                except BlockingIOError:
                    break
                except (BrokenPipeError, ConnectionResetError):
                    break  # already closed: its writes stayed paused for the 1 s idle timeout
                frames, written = frames + 1, written + sent
                if sent < len(frame):
                    break
            await healthy.round_trip("while-the-hostile-peer-is-stuck")
            growth = rss_bytes(broker.pid) - before
            # Unbounded, 1,024 in-flight pulls of ~1 MiB each would cost over 1 GiB.
            assert growth < 256 * 1024 * 1024, f"broker grew by {growth} bytes for {frames} unread pulls"
        finally:
            hostile.close()
        await healthy.round_trip("after")
        await healthy.check_nothing_lost()

    run(main)


def test_idle_connections_are_bounded_and_closed_while_a_healthy_client_works(services) -> None:
    _namesrv, broker = services

    async def main(client: RemotingClient) -> None:
        healthy = HealthyClient(client, broker.address)
        await healthy.round_trip("before")
        idle = await asyncio.to_thread(
            lambda: [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(IDLE_CONNECTIONS)]
        )
        try:
            await healthy.round_trip("among-1000-idle")
            selector = selectors.DefaultSelector()
            for sock in idle:
                selector.register(sock, selectors.EVENT_READ)
            open_count = len(idle)
            while open_count:  # every one of them ends with EOF: refused at once, or closed when idle
                for key, _ in selector.select(timeout=30):
                    assert key.fileobj.recv(1) == b""
                    selector.unregister(key.fileobj)
                    open_count -= 1
                assert open_count == 0 or selector.get_map(), "no progress"
            selector.close()
        finally:
            for sock in idle:
                sock.close()
        assert wait_until(lambda: any("refused a connection" in line for line in broker.output))
        assert wait_until(lambda: any("idle for 1 s" in line for line in broker.output))  # its log pump may lag
        await healthy.round_trip("after")
        await healthy.check_nothing_lost()

    run(main)


def test_a_slow_loris_frame_is_closed_by_its_deadline(services) -> None:
    _namesrv, broker = services
    with RawPeer(broker.address) as peer:
        peer.send(struct.pack(">I", 1000) + b"\x00\x00\x00\x10")  # announces 1000 bytes, sends 4
        assert peer.closed_by_server()
    assert wait_until(lambda: any("did not finish arriving" in line for line in broker.output))


@pytest.mark.parametrize(
    ("ext", "field"),
    [
        ({"topicFilterType": "\ud800"}, "'topicFilterType' holds a lone surrogate"),
        ({"topicFilterType": "SINGLE_TAG\x00"}, "'topicFilterType' holds a NUL"),
        ({"topicFilterType": "x" * 40_000}, "'topicFilterType' is 40000 characters long"),
    ],
)
def test_unfit_text_in_a_topic_is_refused_and_the_broker_keeps_persisting(services, ext, field) -> None:
    _namesrv, broker = services
    fields = CreateTopicRequestHeader("HostileTopic", "TBW102", 4, 4, 6, "SINGLE_TAG", False).to_fields()
    with RawPeer(broker.address) as peer:
        peer.send(raw_request(RequestCode.UPDATE_AND_CREATE_TOPIC, 11, {**fields, **ext}))
        (refused,) = peer.responses(1)
        assert (refused.opaque, refused.code) == (11, ResponseCode.SYSTEM_ERROR) and field in (refused.remark or "")
        peer.send(
            raw_request(
                RequestCode.PULL_MESSAGE,
                12,
                {**PullMessageRequestHeader("g", "Nope\ud800", 0, 0, 1, 0, 0, 0, 0).to_fields()},
            )
        )
        (pulled,) = peer.responses(1)
        assert pulled.opaque == 12 and "'topic' holds a lone surrogate" in (pulled.remark or "")
        peer.send(raw_request(RequestCode.GET_ALL_TOPIC_CONFIG, 13, {}))  # topics.json still encodes
        (configs,) = peer.responses(1)
        assert configs.code == ResponseCode.SUCCESS and b"HostileTopic" not in configs.body

    async def main(client: RemotingClient) -> None:
        await HealthyClient(client, broker.address).round_trip("after-unfit-text")

    run(main)


def test_a_huge_integer_closes_only_its_connection(services) -> None:
    _namesrv, broker = services
    with RawPeer(broker.address) as peer:
        peer.send(raw_request("9" * 5000, 1, {}))
        assert peer.closed_by_server()
    with RawPeer(broker.address) as peer:
        peer.send(raw_request(RequestCode.GET_ALL_TOPIC_CONFIG, 2, {}) + raw_frame(b'{"code":' + b"7" * 5000 + b"}"))
        (served,) = peer.responses(1)  # the request before the bad frame is answered, then the close
        assert (served.opaque, served.code) == (2, ResponseCode.SUCCESS)
        assert peer.closed_by_server()
    assert not [line for line in broker.output if "Traceback" in line or "Fatal error" in line]


def test_the_name_server_answers_unfit_text_and_refuses_a_takeover(services) -> None:
    namesrv, broker = services
    assert wait_until(lambda: _route(namesrv.address, "TBW102") is not None)
    with RawPeer(namesrv.address) as peer:
        peer.send(raw_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": "Nope\ud800"}))
        (route,) = peer.responses(1)
        assert route.opaque == 1 and "'topic' holds a lone surrogate" in (route.remark or "")
        evil = RegisterBrokerRequestHeader("evil\ud800", "127.0.0.1:1", "DefaultCluster", "127.0.0.1:2", 0)
        peer.send(raw_request(RequestCode.REGISTER_BROKER, 2, evil.to_fields()))
        (registered,) = peer.responses(1)
        assert registered.opaque == 2 and "'brokerName' holds a lone surrogate" in (registered.remark or "")

        takeover = RegisterBrokerRequestHeader(BROKER_NAME, "127.0.0.1:1", "DefaultCluster", "127.0.0.1:2", 0)
        peer.send(raw_request(RequestCode.REGISTER_BROKER, 3, takeover.to_fields()))
        peer.send(
            raw_request(
                RequestCode.UNREGISTER_BROKER,
                4,
                {
                    "brokerName": BROKER_NAME,
                    "brokerAddr": broker.address,
                    "clusterName": "DefaultCluster",
                    "brokerId": "0",
                },
            )
        )
        refused = peer.responses(2)
        assert [r.code for r in refused] == [ResponseCode.NO_PERMISSION] * 2
        assert all("another live connection" in (r.remark or "") for r in refused)
    route_data = _route(namesrv.address, "TBW102")
    assert route_data is not None and route_data.broker_datas[0].broker_addrs == {0: broker.address}


def _route(namesrv: str, topic: str) -> TopicRouteData | None:
    with RawPeer(namesrv) as peer:
        peer.send(raw_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": topic}))
        (response,) = peer.responses(1)
    return TopicRouteData.decode(response.body) if response.code == ResponseCode.SUCCESS else None
