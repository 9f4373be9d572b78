"""A loopback peer for the lean-send chunk tests (tests/remoting/test_lean_chunks, tests/client/test_send_in_flight).

:class:`ChunkWatchingPeer` reads until ``count`` requests arrived (setting ``got_chunk``, which
a client still inside one loop turn can only see if it wrote them during that turn), then answers
everything it reads with :func:`answer` until the client closes.
"""

from __future__ import annotations

import socket
import threading

from sparkmq.protocol import FrameDecoder, RemotingCommand


def answer(request: RemotingCommand) -> bytes:
    """The broker's SUCCESS answer naming its request: msgId the opaque in hex, queueOffset the opaque."""
    fields = {"msgId": f"{request.opaque:08X}", "queueId": "0", "queueOffset": str(request.opaque)}
    return request.make_response(ext_fields=fields).encode()


class ChunkWatchingPeer:
    """Serves one connection on a free loopback port in a daemon thread (see the module docstring)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.requests: list[RemotingCommand] = []
        self.got_chunk = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self, wait_s: float = 10.0) -> None:
        """Stop listening and wait (up to ``wait_s``) for the served connection to end (the client closed it)."""
        self._listener.close()
        self._thread.join(wait_s)

    def _serve(self) -> None:
        peer, _ = self._listener.accept()
        requests = self.requests
        with peer:
            decoder = FrameDecoder()
            while len(requests) < self.count and (data := peer.recv(65536)):
                requests.extend(decoder.feed(data))
            self.got_chunk.set()
            answered = 0
            while data := peer.recv(65536):  # answer everything, until the client closes
                requests.extend(decoder.feed(data))
                peer.sendall(b"".join(answer(r) for r in requests[answered:]))
                answered = len(requests)
