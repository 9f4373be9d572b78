"""``direct_pull.PullConnection`` against peers that misbehave, over real loopback sockets: each
failure is a ``PullConnectionError`` naming the broker (the range read then goes on through the
client, ``test_broker_view``), and a connection stopped half-way is never lent again."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from sparkmq.connector.direct_pull import PullConnection, PullConnectionError

FIELDS = {"consumerGroup": "CID_direct", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1"}


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def address(server: socket.socket) -> str:
    host, port = server.getsockname()
    return f"{host}:{port}"


def test_a_broker_that_never_answers_times_out_and_the_connection_is_not_reused(listener: socket.socket) -> None:
    connection = PullConnection(address(listener), None, timeout_s=0.2)
    peer, _ = listener.accept()  # accepts, reads nothing, answers nothing
    try:
        opaque = connection.send(FIELDS)
        with pytest.raises(PullConnectionError, match=f"pull connection to {address(listener)} failed"):
            connection.answer(opaque)
        assert not connection.usable
    finally:
        connection.close()
        peer.close()


def test_a_frame_announcing_an_impossible_length_is_refused(listener: socket.socket) -> None:
    connection = PullConnection(address(listener), None, timeout_s=5.0)
    peer, _ = listener.accept()
    try:
        opaque = connection.send(FIELDS)
        peer.sendall(struct.pack(">II", 2**31 - 1, 16))  # ~2 GiB announced: never allocated
        with pytest.raises(PullConnectionError, match="bad frame"):
            connection.answer(opaque)
        assert not connection.usable
    finally:
        connection.close()
        peer.close()


def test_a_broker_closing_mid_frame_is_reported(listener: socket.socket) -> None:
    connection = PullConnection(address(listener), None, timeout_s=5.0)
    peer, _ = listener.accept()
    try:
        opaque = connection.send(FIELDS)
        peer.sendall(struct.pack(">II", 100, 20) + b"{")  # a frame of 100 bytes, 5 of them sent
        peer.shutdown(socket.SHUT_WR)  # then an orderly close of its side
        with pytest.raises(PullConnectionError, match="closed the connection"):
            connection.answer(opaque)
        assert not connection.usable
    finally:
        connection.close()
        peer.close()


def test_nobody_listening_is_a_connection_error() -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    where = address(probe)
    probe.close()
    with pytest.raises(PullConnectionError, match=f"cannot connect to {where}"):
        PullConnection(where, None, timeout_s=1.0)
