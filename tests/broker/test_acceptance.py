"""Acceptance tests of the broker as a service: real ``sparkmq broker`` / ``namesrv`` processes.

Each test starts its own processes on free loopback ports and talks to them over TCP only:

1. durability: acknowledged SYNC_FLUSH sends survive a SIGKILL of the broker mid-stream;
2. robustness: garbage, oversized and malformed frames hurt only their own connection;
3. long polling: a parked pull answers within 50 ms of a message arriving, or at its timeout;
4. eviction: a killed broker's routes leave the NameServer at once and return on restart;
5. SIGTERM: exit 0, no ``abort`` marker, committed consumer offsets persisted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from sparkmq.message import iter_records
from sparkmq.protocol import FrameDecoder, PullSysFlag, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader, GetRouteInfoRequestHeader
from sparkmq.protocol.bodies import TopicRouteData
from sparkmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2
from sparkmq.remoting import RemotingClient
from support.processes import REPO_ROOT, BrokerProcess, NamesrvProcess, ServiceProcess, wait_until

PRODUCER_SCRIPT = Path(__file__).with_name("acceptance_producer.py")
GROUP = "acceptance-consumer"
RESPONSE_TIMEOUT_S = 5.0


# --- helpers ---------------------------------------------------------------------------------


def send_fields(topic: str, queue_id: int, queues: int = 4, **overrides: str) -> dict[str, str]:
    header = SendMessageRequestHeaderV2(
        "acceptance-producer", topic, "TBW102", queues, queue_id, 0, int(time.time() * 1000), 0, None
    )
    fields = header.to_fields()
    fields.update(overrides)
    return fields


def pull_fields(topic: str, queue_id: int, offset: int, *, max_msgs: int = 1024, suspend_ms: int = 0) -> dict[str, str]:
    flags = PullSysFlag.SUSPEND if suspend_ms else PullSysFlag(0)
    return PullMessageRequestHeader(GROUP, topic, queue_id, offset, max_msgs, int(flags), 0, suspend_ms, 0).to_fields()


async def send(
    client: RemotingClient, address: str, topic: str, queue_id: int, body: bytes, queues: int = 4
) -> RemotingCommand:
    return await client.invoke(
        address, RequestCode.SEND_MESSAGE_V2, send_fields(topic, queue_id, queues), body, timeout=RESPONSE_TIMEOUT_S
    )


async def pull(
    client: RemotingClient,
    address: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_msgs: int = 1024,
    suspend_ms: int = 0,
) -> RemotingCommand:
    return await client.invoke(
        address,
        RequestCode.PULL_MESSAGE,
        pull_fields(topic, queue_id, offset, max_msgs=max_msgs, suspend_ms=suspend_ms),
        timeout=RESPONSE_TIMEOUT_S + suspend_ms / 1000,
    )


async def pull_all(client: RemotingClient, address: str, topic: str, queue_id: int) -> list[tuple[int, bytes]]:
    """Every stored message of a queue as (queue offset, body), from offset 0 until PULL_NOT_FOUND."""
    messages: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        response = await pull(client, address, topic, queue_id, offset)
        if response.code == ResponseCode.PULL_NOT_FOUND:
            return messages
        assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
        records = [(m.queue_offset, bytes(m.body)) for m in iter_records(response.body, check_crc=True)]
        assert records, "SUCCESS with an empty body"
        messages += records
        offset = int(response.ext_fields["nextBeginOffset"])
        assert offset == records[-1][0] + 1


async def create_topic(client: RemotingClient, address: str, topic: str, queues: int) -> None:
    header = CreateTopicRequestHeader(topic, "TBW102", queues, queues, 6, "SINGLE_TAG", False)
    response = await client.invoke(
        address, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_fields(), timeout=RESPONSE_TIMEOUT_S
    )
    assert response.code == ResponseCode.SUCCESS, response.remark


def run(main: Callable[[RemotingClient], Awaitable[None]]) -> None:
    """Run ``main(client)`` in a fresh event loop, closing the client whatever happens."""

    async def wrapper() -> None:
        client = RemotingClient()
        try:
            await main(client)
        finally:
            await client.close()

    asyncio.run(wrapper())


@pytest.fixture
def processes() -> Iterator[list[ServiceProcess]]:
    """Every process a test starts goes here and is stopped (SIGTERM, then SIGKILL) afterwards."""
    started: list[ServiceProcess] = []
    yield started
    for process in reversed(started):
        process.stop()


# --- 1. durability through the service ---------------------------------------------------------


TOPIC_DURABLE = "AcceptanceDurable"
DURABLE_QUEUES = 4
MIN_ACKS_BEFORE_KILL = 200


def test_acknowledged_sync_flush_sends_survive_a_broker_sigkill(
    tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    store = tmp_path / "store"
    broker = BrokerProcess.start(store, None, "--flush", "sync")
    processes.append(broker)
    producer = subprocess.Popen(
        [sys.executable, str(PRODUCER_SCRIPT), broker.address, TOPIC_DURABLE, str(DURABLE_QUEUES), "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    lines: list[str] = []

    def pump() -> None:
        assert producer.stdout is not None
        for line in producer.stdout:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: sum(line.startswith("ACK ") for line in lines) >= MIN_ACKS_BEFORE_KILL, 30.0), (
            "producer did not reach enough acks:\n" + "\n".join(lines[-20:])
        )
        broker.kill()  # mid-stream: the producer still has sends in flight
        producer.wait(15.0)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
        assert producer.stdout is not None
        reader.join(5.0)
        producer.stdout.close()
    assert producer.returncode == 0, "\n".join(lines[-20:])
    assert lines[-1].startswith("FAIL"), "the producer should have stopped on a failed send"
    acked: dict[tuple[int, int], bytes] = {}
    for line in lines:
        if line.startswith("ACK "):
            _, queue, offset, number = line.split()
            acked[(int(queue), int(offset))] = f"body-{number}".encode()
    assert len(acked) >= MIN_ACKS_BEFORE_KILL

    restarted = BrokerProcess.start(store, None, "--flush", "sync", port=broker.port)
    processes.append(restarted)

    async def check(client: RemotingClient) -> None:
        seen_bodies: set[bytes] = set()
        for queue_id in range(DURABLE_QUEUES):
            messages = await pull_all(client, restarted.address, TOPIC_DURABLE, queue_id)
            offsets = [offset for offset, _ in messages]
            assert offsets == list(range(len(messages))), f"queue {queue_id} has gaps or duplicates"
            stored = dict(messages)
            for (acked_queue, offset), body in acked.items():
                if acked_queue == queue_id:
                    assert offset in stored, f"acked message {body!r} at {queue_id}/{offset} is lost"
                    assert stored[offset].startswith(body + b"."), (queue_id, offset, stored[offset][:20], body)
            for _, stored_body in messages:
                name = stored_body.split(b".", 1)[0]
                assert name.startswith(b"body-") and name not in seen_bodies, name
                seen_bodies.add(name)
            max_offset = await client.invoke(
                restarted.address, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC_DURABLE, "queueId": str(queue_id)}
            )
            assert max_offset.code == ResponseCode.SUCCESS
            assert int(max_offset.ext_fields["offset"]) == len(messages)
        # the recovered broker keeps appending right after what it recovered
        response = await send(client, restarted.address, TOPIC_DURABLE, 0, b"after-restart")
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert (
            int(response.ext_fields["queueOffset"])
            == len(await pull_all(client, restarted.address, TOPIC_DURABLE, 0)) - 1
        )

    run(check)


# --- 2. robustness against bad peers -----------------------------------------------------------


TOPIC_HEALTHY = "AcceptanceHealthy"
MAX_MESSAGE_SIZE = 65536


class RawConnection:
    """A plain socket speaking (or abusing) the protocol, for one misbehaving peer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()

    @classmethod
    async def open(cls, address: str) -> RawConnection:
        host, port = address.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def request(
        self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"", opaque: int = 1
    ) -> RemotingCommand:
        await self.send(RemotingCommand.request(code, opaque, ext_fields=ext_fields, body=body).encode())
        response = await self.next_command()
        assert response is not None, f"connection closed instead of answering code {code}"
        assert response.is_response and response.opaque == opaque
        return response

    async def next_command(self) -> RemotingCommand | None:
        """The next frame from the broker, or None once it closed the connection."""
        async with asyncio.timeout(RESPONSE_TIMEOUT_S):
            while True:
                command = self.decoder.next_command()
                if command is not None:
                    return command
                chunk = await self.reader.read(65536)
                if not chunk:
                    return None
                self.decoder.receive_data(chunk)

    async def expect_error_or_close(self) -> RemotingCommand | None:
        """Either an error response with a remark, or the broker closing the connection."""
        try:
            command = await self.next_command()
        except ConnectionResetError:
            return None
        if command is not None:
            assert command.is_response and command.code != ResponseCode.SUCCESS and command.remark, command
        return command

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionResetError):
            await self.writer.wait_closed()


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


async def healthy_loop(client: RemotingClient, address: str, stop: asyncio.Event, failures: list[str]) -> int:
    """Send then pull back, over and over; every non-SUCCESS answer or exception is a failure."""
    rounds = 0
    offset = 0
    while not stop.is_set():
        body = f"healthy-{rounds}".encode()
        try:
            sent = await send(client, address, TOPIC_HEALTHY, 0, body)
            if sent.code != ResponseCode.SUCCESS:
                failures.append(f"send: {sent.code} {sent.remark}")
                continue
            pulled = await pull(client, address, TOPIC_HEALTHY, 0, offset, max_msgs=1)
            if pulled.code != ResponseCode.SUCCESS:
                failures.append(f"pull: {pulled.code} {pulled.remark}")
                continue
            got = [bytes(m.body) for m in iter_records(pulled.body, check_crc=True)]
            if got != [body]:
                failures.append(f"pull at {offset}: {got!r} != {body!r}")
            offset = int(pulled.ext_fields["nextBeginOffset"])
        except Exception as exc:  # noqa: BLE001 - the test counts every kind of failure
            failures.append(f"{type(exc).__name__}: {exc}")
        rounds += 1
        await asyncio.sleep(0.005)
    return rounds


async def abuse(address: str) -> dict[str, RemotingCommand | None]:
    """Each misbehaviour on its own raw connection; returns what each one got back."""
    results: dict[str, RemotingCommand | None] = {}

    async def attempt(name: str, data: bytes) -> RawConnection:
        connection = await RawConnection.open(address)
        await connection.send(data)
        results[name] = await connection.expect_error_or_close()
        return connection

    rng = random.Random(20240601)
    # random bytes: the length prefix is garbage (almost surely over 16 MiB)
    for round_ in range(5):
        await (await attempt(f"random-{round_}", rng.randbytes(4096))).close()
    # random bytes behind a plausible length prefix: the payload does not decode
    for round_ in range(5):
        payload = rng.randbytes(512)
        await (await attempt(f"random-framed-{round_}", struct.pack(">I", len(payload)) + payload)).close()
    await (await attempt("2GiB-prefix", struct.pack(">I", 2**31) + b"\x00" * 64)).close()
    await (await attempt("not-json", frame(b"this is {not JSON"))).close()
    await (await attempt("json-array", frame(b"[1,2,3]"))).close()
    await (await attempt("header-too-long", struct.pack(">II", 8, 1000) + b"{}{}")).close()
    await (await attempt("16MiB+1-prefix", struct.pack(">I", 16 * 1024 * 1024 - 3) + b"\x00" * 64)).close()
    await (await attempt("no-opaque", frame(b'{"code":10,"flag":0}'))).close()
    await (await attempt("binary-header-garbage", frame(rng.randbytes(40), serialize_type=1))).close()

    # unknown request code: REQUEST_CODE_NOT_SUPPORTED, and the connection stays usable
    connection = await RawConnection.open(address)
    try:
        results["unknown-code"] = await connection.request(9999, {"x": "y"})
        again = await connection.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC_HEALTHY, "queueId": "0"}, opaque=2)
        assert again.code == ResponseCode.SUCCESS, again
        # a send over maxMessageSize: MESSAGE_ILLEGAL, connection still usable
        results["oversized-send"] = await connection.request(
            RequestCode.SEND_MESSAGE_V2, send_fields(TOPIC_HEALTHY, 1), b"x" * 70_000, opaque=3
        )
        # a send missing a required header field (no topic "b"): an error response
        fields = send_fields(TOPIC_HEALTHY, 1)
        del fields["b"]
        results["missing-field"] = await connection.request(RequestCode.SEND_MESSAGE_V2, fields, b"m", opaque=4)
        results["bad-field-type"] = await connection.request(
            RequestCode.SEND_MESSAGE_V2, send_fields(TOPIC_HEALTHY, 1, e="not-a-number"), b"m", opaque=8
        )
        results["bad-queue"] = await connection.request(
            RequestCode.SEND_MESSAGE_V2, send_fields(TOPIC_HEALTHY, 99), b"m", opaque=9
        )
        ok = await connection.request(RequestCode.SEND_MESSAGE_V2, send_fields(TOPIC_HEALTHY, 1), b"fine", opaque=5)
        assert ok.code == ResponseCode.SUCCESS, ok
        # unknown topics with autoCreateTopicEnable=false
        results["send-unknown-topic"] = await connection.request(
            RequestCode.SEND_MESSAGE_V2, send_fields("NoSuchTopic", 0), b"m", opaque=6
        )
        results["pull-unknown-topic"] = await connection.request(
            RequestCode.PULL_MESSAGE, pull_fields("NoSuchTopic", 0, 0), opaque=7
        )
    finally:
        await connection.close()
    return results


def test_bad_peers_get_errors_or_closed_connections_and_healthy_clients_see_nothing(
    tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    broker = BrokerProcess.start(
        tmp_path / "store", None, "--set", f"maxMessageSize={MAX_MESSAGE_SIZE}", "--set", "autoCreateTopicEnable=false"
    )
    processes.append(broker)

    async def main(client: RemotingClient) -> None:
        await create_topic(client, broker.address, TOPIC_HEALTHY, 2)
        stop = asyncio.Event()
        failures: list[str] = []
        healthy = asyncio.create_task(healthy_loop(client, broker.address, stop, failures))
        try:
            await asyncio.sleep(0.2)
            results = await abuse(broker.address)
            await asyncio.sleep(0.2)
        finally:
            stop.set()
            rounds = await healthy
        assert failures == []
        assert rounds >= 10, rounds

        for name in [n for n in results if n.startswith("random")] + [
            "2GiB-prefix",
            "16MiB+1-prefix",
            "header-too-long",
        ]:
            assert results[name] is None, f"{name}: expected the connection closed, got {results[name]}"
        for name in ("not-json", "json-array", "no-opaque", "binary-header-garbage"):
            assert results[name] is None or results[name].remark, name
        unknown = results["unknown-code"]
        assert unknown is not None and unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and unknown.remark
        oversized = results["oversized-send"]
        assert oversized is not None and oversized.code == ResponseCode.MESSAGE_ILLEGAL and oversized.remark
        for name in ("missing-field", "bad-field-type", "bad-queue"):
            got = results[name]
            assert got is not None and got.code != ResponseCode.SUCCESS and got.remark, (name, got)
        for name in ("send-unknown-topic", "pull-unknown-topic"):
            got = results[name]
            assert got is not None and got.code == ResponseCode.TOPIC_NOT_EXIST and got.remark, (name, got)
        assert broker.process.poll() is None, "the broker died"

    run(main)


# --- 3. long polling -----------------------------------------------------------------------------


TOPIC_POLL = "AcceptanceLongPoll"
LONG_POLL_ROUNDS = 7
MAX_WAKE_LATENCY_S = 0.050


def test_a_parked_pull_answers_when_a_message_arrives_or_at_its_timeout(
    tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    broker = BrokerProcess.start(tmp_path / "store", None)
    processes.append(broker)

    async def main(client: RemotingClient) -> None:
        producer = RemotingClient()  # a connection of its own, as a separate producer would have
        try:
            first = await send(producer, broker.address, TOPIC_POLL, 0, b"warm-up", queues=1)
            assert first.code == ResponseCode.SUCCESS, first.remark
            latencies = []
            for round_ in range(1, LONG_POLL_ROUNDS + 1):
                parked = asyncio.create_task(pull(client, broker.address, TOPIC_POLL, 0, round_, suspend_ms=5000))
                pulled_at: list[float] = []
                parked.add_done_callback(lambda _task, arrivals=pulled_at: arrivals.append(time.monotonic()))
                await asyncio.sleep(0.2)  # let the pull park on the empty queue
                assert not parked.done(), "the pull answered before any message arrived"
                sent = await send(producer, broker.address, TOPIC_POLL, 0, f"m-{round_}".encode(), queues=1)
                sent_at = time.monotonic()
                assert sent.code == ResponseCode.SUCCESS, sent.remark
                response = await parked
                assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
                assert [bytes(m.body) for m in iter_records(response.body)] == [f"m-{round_}".encode()]
                latencies.append(pulled_at[0] - sent_at)
            assert statistics.median(latencies) <= MAX_WAKE_LATENCY_S, latencies

            started = time.monotonic()
            timed_out = await pull(client, broker.address, TOPIC_POLL, 0, LONG_POLL_ROUNDS + 1, suspend_ms=1000)
            elapsed = time.monotonic() - started
            assert timed_out.code == ResponseCode.PULL_NOT_FOUND, (timed_out.code, timed_out.remark)
            assert timed_out.ext_fields["nextBeginOffset"] == str(LONG_POLL_ROUNDS + 1)
            assert 0.9 <= elapsed <= 2.0, elapsed
        finally:
            await producer.close()

    run(main)


# --- 4. NameServer eviction ------------------------------------------------------------------------


TOPIC_ROUTE = "AcceptanceRoute"
EVICTION_DEADLINE_S = 5.0
SCAN_EVICTION_DEADLINE_S = 5.0  # brokerExpired 3 s + scanInterval 1 s + slack


def test_a_killed_broker_leaves_the_route_and_comes_back_on_restart(
    tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    namesrv = NamesrvProcess.start("--scan-interval", "1", "--broker-expired", "3")
    processes.append(namesrv)
    store = tmp_path / "store"
    broker_args = ("--set", "registerNameServerPeriod=1000")
    broker = BrokerProcess.start(store, namesrv.address, *broker_args)
    processes.append(broker)

    async def route(client: RemotingClient) -> TopicRouteData | None:
        response = await client.invoke(
            namesrv.address, RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(TOPIC_ROUTE).to_fields()
        )
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
        return TopicRouteData.decode(response.body)

    async def wait_for_route(client: RemotingClient, present: bool, timeout_s: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            data = await route(client)
            addresses = {a for b in data.broker_datas for a in b.broker_addrs.values()} if data else set()
            if (broker.address in addresses) == present:
                return time.monotonic() - started
            await asyncio.sleep(0.05)
        raise AssertionError(f"route present={present} not seen within {timeout_s} s")

    async def before_kill(client: RemotingClient) -> None:
        sent = await send(client, broker.address, TOPIC_ROUTE, 0, b"creates the topic")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        await wait_for_route(client, True, 5.0)

    run(before_kill)

    # Silent but connected (SIGSTOP): only the expiry scan can evict it, after brokerExpired 3 s
    # since its last registration (≤ 1 s before the stop) plus at most one 1 s scan period.
    os.kill(broker.pid, signal.SIGSTOP)
    try:

        async def while_stopped(client: RemotingClient) -> None:
            waited = await wait_for_route(client, False, SCAN_EVICTION_DEADLINE_S)
            assert waited >= 1.5, f"evicted after {waited:.2f} s: before brokerExpired could pass"

        run(while_stopped)
    finally:
        os.kill(broker.pid, signal.SIGCONT)

    async def after_continue(client: RemotingClient) -> None:
        await wait_for_route(client, True, 5.0)  # it registers again at its next 1 s period

    run(after_continue)
    broker.kill()

    async def after_kill(client: RemotingClient) -> None:
        # the closed connection evicts at once; the scan would within brokerExpired + scan period
        assert await wait_for_route(client, False, EVICTION_DEADLINE_S) <= EVICTION_DEADLINE_S

    run(after_kill)
    restarted = BrokerProcess.start(store, namesrv.address, *broker_args, port=broker.port)
    processes.append(restarted)
    assert restarted.address == broker.address

    async def after_restart(client: RemotingClient) -> None:
        await wait_for_route(client, True, 5.0)

    run(after_restart)


# --- 5. SIGTERM --------------------------------------------------------------------------------------


TOPIC_OFFSETS = "AcceptanceOffsets"


def test_sigterm_exits_0_removes_the_abort_marker_and_persists_offsets(
    tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    store = tmp_path / "store"
    broker = BrokerProcess.start(store, None)
    processes.append(broker)
    assert (store / "abort").exists(), "a running broker keeps the abort marker"

    async def main(client: RemotingClient) -> None:
        for number in range(3):
            sent = await send(client, broker.address, TOPIC_OFFSETS, 2, f"m{number}".encode())
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        committed = await client.invoke(
            broker.address,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": GROUP, "topic": TOPIC_OFFSETS, "queueId": "2", "commitOffset": "3"},
        )
        assert committed.code == ResponseCode.SUCCESS, committed.remark

    run(main)
    assert broker.stop() == 0, "\n".join(broker.output[-30:])
    assert not (store / "abort").exists()
    table = json.loads((store / "config" / "consumerOffset.json").read_text(encoding="utf-8"))["offsetTable"]
    assert table[f"{TOPIC_OFFSETS}@{GROUP}"] == {"2": 3}
