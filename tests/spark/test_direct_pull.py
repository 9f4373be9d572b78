"""``direct_pull.PullConnection`` against peers that misbehave, over real loopback sockets: each
failure is a ``PullConnectionError`` naming the broker (the range read then goes on through the
client, ``test_broker_view``), and a connection stopped half-way is never lent again."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator

import pytest

from sparkmq.connector.direct_pull import KEPT_BUFFERS, PullConnection, PullConnectionError
from sparkmq.protocol import RemotingCommand

FIELDS = {"consumerGroup": "CID_direct", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1"}


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def address(server: socket.socket) -> str:
    host, port = server.getsockname()
    return f"{host}:{port}"


@contextlib.contextmanager
def connected(listener: socket.socket, timeout_s: float = 5.0) -> Iterator[tuple[PullConnection, socket.socket]]:
    """A pull connection to ``listener`` and the peer's end of it, both closed after."""
    connection = PullConnection(address(listener), None, timeout_s=timeout_s)
    peer, _ = listener.accept()
    try:
        yield connection, peer
    finally:
        connection.close()
        peer.close()


def test_a_broker_that_never_answers_times_out_and_the_connection_is_not_reused(listener: socket.socket) -> None:
    with connected(listener, timeout_s=0.2) as (connection, peer):  # accepts, reads nothing, answers nothing
        opaque = connection.send(FIELDS)
        with pytest.raises(PullConnectionError, match=f"pull connection to {address(listener)} failed"):
            connection.answer(opaque)
        assert not connection.usable


def test_a_frame_announcing_an_impossible_length_is_refused(listener: socket.socket) -> None:
    with connected(listener) as (connection, peer):
        opaque = connection.send(FIELDS)
        peer.sendall(struct.pack(">II", 2**31 - 1, 16))  # ~2 GiB announced: never allocated
        with pytest.raises(PullConnectionError, match="bad frame"):
            connection.answer(opaque)
        assert not connection.usable


def test_a_broker_closing_mid_frame_is_reported(listener: socket.socket) -> None:
    with connected(listener) as (connection, peer):
        opaque = connection.send(FIELDS)
        peer.sendall(struct.pack(">II", 100, 20) + b"{")  # a frame of 100 bytes, 5 of them sent
        peer.shutdown(socket.SHUT_WR)  # then an orderly close of its side
        with pytest.raises(PullConnectionError, match="closed the connection"):
            connection.answer(opaque)
        assert not connection.usable


def test_nobody_listening_is_a_connection_error() -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    where = address(probe)
    probe.close()
    with pytest.raises(PullConnectionError, match=f"cannot connect to {where}"):
        PullConnection(where, None, timeout_s=1.0)


def _answers(peer: socket.socket, opaques: list[int], bodies: list[bytes]) -> None:
    """The peer answers each request with its body (a PULL answer's shape: a response and a body)."""
    for opaque, body in zip(opaques, bodies, strict=True):
        request = RemotingCommand.request(11, opaque)
        peer.sendall(request.make_response(ext_fields={"nextBeginOffset": "0"}, body=body).encode())


def test_answers_whose_views_are_held_keep_their_bytes(listener: socket.socket) -> None:
    """A kept buffer is reused only once no view of its last answer is left: bodies held across later
    answers (as the numpy path's Arrow columns hold theirs) never see those answers' bytes."""
    bodies = [bytes([65 + k]) * (3000 - k) for k in range(KEPT_BUFFERS * 3)]  # each fits an earlier buffer
    with connected(listener) as (connection, peer):
        opaques = [connection.send(FIELDS) for _ in bodies]
        _answers(peer, opaques, bodies)
        held = [connection.answer(opaque)[1] for opaque in opaques]
        assert [bytes(view) for view in held] == bodies
        assert len({id(view.obj) for view in held}) == len(bodies)


def test_an_answer_no_view_refers_to_any_more_lends_its_buffer_to_a_later_one(listener: socket.socket) -> None:
    bodies = [bytes([97 + k]) * (2000 - k) for k in range(KEPT_BUFFERS * 4)]
    kept = 0
    with connected(listener) as (connection, peer):
        opaques = [connection.send(FIELDS) for _ in bodies]
        _answers(peer, opaques, bodies)
        for opaque, body in zip(opaques, bodies, strict=True):
            _command, view = connection.answer(opaque)
            assert bytes(view) == body
            kept += any(view.obj is buffer for buffer in connection._buffers)
            del view, _command  # a consumer done with the answer (the C decode copied what it needs)
        assert kept == len(bodies)  # every answer in one of the connection's few buffers
        assert len(connection._buffers) <= KEPT_BUFFERS


def test_an_answer_bigger_than_a_kept_buffer_is_read_whole(listener: socket.socket) -> None:
    bodies = [b"s" * 100, b"L" * 100_000, b"m" * 5_000, b"X" * 300_000]
    with connected(listener) as (connection, peer):
        opaques = [connection.send(FIELDS) for _ in bodies]
        _answers(peer, opaques, bodies)
        for opaque, body in zip(opaques, bodies, strict=True):
            assert bytes(connection.answer(opaque)[1]) == body
