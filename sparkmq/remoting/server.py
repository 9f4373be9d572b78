"""RemotingServer: accepts connections and dispatches requests by code to processors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from sparkmq.protocol import RemotingCommand, ResponseCode, code_name
from sparkmq.remoting.connection import Answer, FrameLane, RemotingConnection
from sparkmq.remoting.lanes import Lanes
from sparkmq.remoting.limits import FrameBudget, ServerLimits, default_max_connections
from sparkmq.remoting.serving import error_response
from sparkmq.remoting.tls import ServerTls, create_server
from sparkmq.remoting.turns import TurnGroups, TurnLane

logger = logging.getLogger(__name__)
REFUSAL_LOG_INTERVAL_S = 1.0
#: ``NettyServerConfig.serverSocketBacklog``: 1024 (asyncio's 100 drops SYNs in a burst: 1 s retries).
ACCEPT_BACKLOG = 1024
COMPANION_TRIES = 32  # free-port picks before a server on port 0 gives up on a free companion port

Processor = Callable[[RemotingCommand, RemotingConnection], Awaitable[RemotingCommand | None]]
#: Runs before a request's processor: None serves it, a response refuses it (the broker's ACL check).
Authorizer = Callable[[RemotingCommand, RemotingConnection], RemotingCommand | None]


class GroupProcessor(Protocol):
    """A processor that also serves a run of its requests together (``serve_group``).

    ``serve_group`` answers each request (its response, None, or an awaitable of it) and must
    not raise: a failure of one request is that request's answer, never its neighbours'.
    """

    def __call__(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> Awaitable[RemotingCommand | None]: ...

    def serve_group(self, requests: list[RemotingCommand], connection: RemotingConnection) -> list[Answer]: ...


class RemotingServer:
    """A TCP server on ``host:port`` (0 = a free port); ``register`` maps codes to processors.

    ``limits`` bounds what peers may cost it: a connection over ``max_connections`` is closed
    at once (logged), idle ones after ``idle_timeout_s``, and unfinished frames are capped.

    For example::

        server = RemotingServer("127.0.0.1", 0); server.register(RequestCode.HEART_BEAT, on_heartbeat)
        await server.start(); ...; await server.close()
    """

    def __init__(self, host: str, port: int, limits: ServerLimits | None = None, tls: ServerTls | None = None) -> None:
        self.host = host
        self.tls = tls
        self.port = port
        self.limits = ServerLimits() if limits is None else limits
        self.max_connections = self.limits.max_connections or default_max_connections()
        self.frame_budget = FrameBudget(self.limits.max_buffered_frame_bytes)
        self.refused_connections = 0
        self._last_refusal_log = float("-inf")
        self._processors: dict[int, Processor] = {}
        self._group_processors: dict[int, GroupProcessor] = {}
        self._connections: set[RemotingConnection] = set()
        self._close_listeners: list[Callable[[RemotingConnection], None]] = []
        self._server: Any = None  # an asyncio.Server, or a tls.SniffingServer in permissive TLS mode
        self._companion: Any = None  # the same, on ``companion_port``
        self.companion_port: int | None = None
        self._authorize: Authorizer | None = None
        self._lane: FrameLane | None = None
        self._lanes: Lanes | None = None  # what connections call: ``lane`` while no authorizer is set
        self.lane_codes: frozenset[int] = frozenset()
        self._turn_lane: TurnLane | None = None
        self._turn_lane_beside: FrameLane | None = None  # the ``lane`` it was set beside
        self._turns = TurnGroups(self._prepare_turn, self._serve_turn)

    def register(self, code: int, processor: Processor) -> None:
        """Serve ``code`` with ``processor``; one with a ``serve_group`` method also gets runs of its
        requests decoded from one read together (answered without a Task where it can)."""
        self._processors[int(code)] = processor
        if int(code) in self.lane_codes:  # the lane stood for the processor this one replaces
            self.lane, self.lane_codes, self.turn_lane = None, frozenset(), None
        if callable(getattr(processor, "serve_group", None)):
            self._group_processors[int(code)] = processor  # type: ignore[assignment]  # has serve_group: checked above
        else:
            self._group_processors.pop(int(code), None)

    @property
    def authorize(self) -> Authorizer | None:
        """Sees every request before its processor; while set, no lane serves frames (a lane does not authorize)."""
        return self._authorize

    @authorize.setter
    def authorize(self, authorize: Authorizer | None) -> None:
        self._authorize = authorize
        self._relane()

    @property
    def lane(self) -> FrameLane | None:
        """Serves leading frames of a read before they are decoded (the broker's native lanes, a
        :class:`Lanes`), standing in for the processors of ``lane_codes``; never while
        ``authorize`` is set, and dropped when one of those codes gets another processor."""
        return self._lane

    @lane.setter
    def lane(self, lane: FrameLane | None) -> None:
        self._lane = lane
        self._relane()

    def _relane(self) -> None:
        """Give every connection the lanes it calls now (each read calls them with no server frame between)."""
        lane = self._lane
        if lane is None or self._authorize is not None:
            self._lanes = None
        else:  # a single lane gets Lanes' guard: its failure is logged and its frames decoded
            self._lanes = lane if isinstance(lane, Lanes) else Lanes(lane)
        for connection in self._connections:
            connection.set_lanes(self._lanes)

    @property
    def turn_lane(self) -> TurnLane | None:
        """Serves the leading lane frames that several connections read in one loop turn as one
        group (the broker's send lane; see :mod:`sparkmq.remoting.turns`), under the same rules as
        ``lane`` and only while ``lane`` is the one it was set beside (a lane put in its place
        serves every read itself). Set it before ``start``: connections made without it serve
        each read alone."""
        return self._turn_lane

    @turn_lane.setter
    def turn_lane(self, lane: TurnLane | None) -> None:
        self._turn_lane, self._turn_lane_beside = lane, self.lane

    def on_connection_closed(self, listener: Callable[[RemotingConnection], None]) -> None:
        """Call ``listener(connection)`` when any client connection closes."""
        self._close_listeners.append(listener)

    @property
    def connections(self) -> frozenset[RemotingConnection]:
        return frozenset(self._connections)

    async def _dispatch(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | None:
        processor = self._processors.get(request.code)
        if processor is None:
            return request.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request type {request.code} ({code_name(request.code, response=False)}) not supported",
            )
        if self.authorize is not None and (refusal := self.authorize(request, connection)) is not None:
            return refusal
        return await processor(request, connection)

    def _dispatch_group(self, requests: list[RemotingCommand], connection: RemotingConnection) -> list[Answer]:
        """Answer the requests of one read, in arrival order: a run of consecutive requests for one
        group processor is served by one ``serve_group`` call; from the first request of another
        processor on, each is its processor's coroutine (a Task, run in order)."""
        answers: list[Answer] = []
        count, first = len(requests), 0
        while first < count:
            group = self._group_processors.get(requests[first].code)
            if group is None:  # a Task: so that it runs first, every later request of the read is one too
                return answers + [self._dispatch(request, connection) for request in requests[first:]]
            stop = first + 1
            while stop < count and self._group_processors.get(requests[stop].code) is group:
                stop += 1
            answers += self._serve_group(group, requests[first:stop], connection)
            first = stop
        return answers

    def _serve_group(
        self, group: GroupProcessor, run: list[RemotingCommand], connection: RemotingConnection
    ) -> list[Answer]:
        if self.authorize is not None:  # each request checked; the refused are answered, the rest served together
            refusals = [self.authorize(request, connection) for request in run]
            if any(refusal is not None for refusal in refusals):
                allowed = [request for request, refusal in zip(run, refusals, strict=True) if refusal is None]
                served = iter(self._serve_run(group, allowed, connection))
                return [next(served) if refusal is None else refusal for refusal in refusals]
        return self._serve_run(group, run, connection)

    def _serve_run(
        self, group: GroupProcessor, run: list[RemotingCommand], connection: RemotingConnection
    ) -> list[Answer]:
        if not run:
            return []
        try:
            return group.serve_group(run, connection)
        except Exception as exc:  # noqa: BLE001 - a processor bug: logged, every request of the run answered with it
            return [error_response(request, exc, connection.peer) for request in run]

    def _prepare_turn(
        self, buffer: bytes | bytearray, position: int, connection: RemotingConnection
    ) -> tuple[Any, int] | None:
        lane = self._turn_lane
        beside = self._lane  # the attributes, not the properties: this runs per connection per turn
        if lane is None or beside is None or beside is not self._turn_lane_beside or self._authorize is not None:
            return None
        try:
            return lane.prepare(buffer, position, connection)
        except Exception:  # a lane bug: logged, and the frames go the usual way instead
            logger.exception("the turn lane failed to prepare; its frames are served by the processors")
            return None

    def _serve_turn(self, prepared: list[tuple[RemotingConnection, Any]]) -> bool:
        lane = self._turn_lane
        if lane is None:
            return False
        try:
            return lane.serve(prepared)
        except Exception:  # a lane bug before anything was stored: the frames go the usual way
            logger.exception("the turn lane failed to serve %d connections' frames", len(prepared))
            return False

    def _connection_closed(self, connection: RemotingConnection) -> None:
        self._connections.discard(connection)
        for listener in self._close_listeners:
            listener(connection)

    def _new_connection(self) -> asyncio.Protocol:
        if len(self._connections) >= self.max_connections:
            return _Refused(self)
        connection = RemotingConnection(
            self._dispatch,
            self._connection_closed,
            limits=self.limits,
            budget=self.frame_budget,
            group_handler=self._dispatch_group,
            lanes=self._lanes,
            turns=self._turns if self.turn_lane is not None else None,
        )
        self._connections.add(connection)
        return connection

    def record_refusal(self, peer: object) -> None:
        """Count (and at most once a second log) a connection closed for being over the limit."""
        self.refused_connections += 1
        now = asyncio.get_running_loop().time()
        if now - self._last_refusal_log >= REFUSAL_LOG_INTERVAL_S:  # one line per second under a flood
            self._last_refusal_log = now
            logger.warning(
                "refused a connection from %s: %d connections open, the limit is %d (%d refused so far)",
                peer,
                len(self._connections),
                self.max_connections,
                self.refused_connections,
            )

    async def start(self, serve: bool = True, *, companion_below: int = 0) -> int:
        """Bind (and with ``serve`` accept connections); return the bound port.

        ``companion_below`` > 0 also listens on ``port - companion_below``, the same server behind both
        sockets (a broker's VIP channel: RocketMQ's ``fastListenPort``, listenPort - 2). On port 0 a port
        whose companion is free too is picked; a fixed port whose companion is taken serves without it.
        """
        requested = self.port
        tries = COMPANION_TRIES if requested == 0 and companion_below > 0 else 1
        for attempt in range(tries):
            self._server = await self._listen(requested, serve)
            self.port = self._server.sockets[0].getsockname()[1]
            if companion_below <= 0:
                break
            try:
                if self.port - companion_below < 1:
                    raise OSError(f"{self.port - companion_below} is not a TCP port")
                self._companion = await self._listen(self.port - companion_below, serve)
                self.companion_port = self.port - companion_below
                break
            except OSError as exc:
                if attempt + 1 == tries:
                    logger.warning(
                        "port %d - %d is unavailable (%s): serving without it", self.port, companion_below, exc
                    )
                    break
                self._server.close()
                await self._server.wait_closed()
        logger.info(
            "remoting server bound to %s:%d%s (at most %d connections)",
            self.host,
            self.port,
            "" if self.companion_port is None else f" and :{self.companion_port}",
            self.max_connections,
        )
        return self.port

    async def _listen(self, port: int, serve: bool) -> Any:
        return await create_server(
            self._new_connection, self.host, port, backlog=ACCEPT_BACKLOG, start_serving=serve, tls=self.tls
        )

    def _listeners(self) -> list[Any]:
        return [server for server in (self._server, self._companion) if server is not None]

    async def start_serving(self) -> None:
        """Accept connections on a server bound with ``start(serve=False)``."""
        assert self._server is not None
        for server in self._listeners():
            await server.start_serving()

    def stop_accepting(self) -> None:
        for server in self._listeners():
            server.close()

    async def close(self) -> None:
        """Stop accepting and close every connection."""
        self.stop_accepting()
        for connection in list(self._connections):
            connection.close()
        for connection in list(self._connections):
            await connection.wait_closed()
        for server in self._listeners():
            await server.wait_closed()


class _Refused(asyncio.Protocol):
    """A connection over the limit: counted, logged, closed before it costs anything."""

    def __init__(self, server: RemotingServer) -> None:
        self._server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._server.record_refusal(transport.get_extra_info("peername"))
        transport.close()
