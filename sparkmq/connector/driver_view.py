"""Blocking cluster queries for Spark's driver side: routes, offsets and commits over plain sockets.

Spark runs a Python streaming source's driver side (``initialOffset``, ``latestOffset``,
``partitions``, ``commit``) in a fresh Python process per query, so every module the source
imports is paid again before each query's first batch. The asyncio client (``BrokerView``: its
loop thread, heartbeat and route-refresh tasks, the remoting package) cost that process ~0.1 s of
import and a client start, for a few request/response pairs per trigger. Here each call is a
blocking exchange over one socket per address (``direct_pull.PullConnection``): the requests for
one broker are all written before their answers are read (matched by opaque), as the client's
``asyncio.gather`` overlapped them. Reading records stays with the executors' ``BrokerView``.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Iterable, Sequence

from sparkmq.client.responses import check_response
from sparkmq.client.routes import TopicRoute
from sparkmq.client.security import ClientSecurity
from sparkmq.connector.direct_pull import PullConnection, PullConnectionError
from sparkmq.connector.view_cache import ViewCache
from sparkmq.errors import ConfigError, OptionError, RemoteError, SparkmqError, TopicNotExistError
from sparkmq.message.names import MASTER_ID, is_system_topic  # topicPattern never matches system topics
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue, TopicList, TopicRouteData
from sparkmq.protocol.consume_stats import ConsumeStats
from sparkmq.protocol.offset_headers import (
    GetConsumeStatsRequestHeader,
    GetRouteInfoRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

BROKER_TIMEOUT_S = 3.0  # the client's default for a broker request
NAMESRV_TIMEOUT_S = 5.0  # the client's for a NameServer's
_RANDOM = random.Random()  # our own: library code must not move the global random state
#: One request: the addresses to try, best first (a broker's master, then its slaves), code, extFields.
Request = tuple[Sequence[str], int, dict[str, str]]
Answer = tuple[RemotingCommand, memoryview]


class DriverView:
    """Queues, offsets and commits of one consumer group, each a blocking call on the caller's thread.

    >>> view = DriverView("127.0.0.1:9876", "orders-to-delta")  # connects on first use
    >>> view.close()
    """

    def __init__(self, namesrv_addr: str, group: str, security: ClientSecurity | None = None) -> None:
        self.namesrv_addresses = [a.strip() for a in namesrv_addr.split(";") if a.strip()]
        if not self.namesrv_addresses:
            raise ConfigError("namesrv_addr names no NameServer (expected host:port[;host:port])")
        self.group = group
        self._security = security
        self._routes: dict[str, TopicRoute] = {}
        self._connections: dict[str, PullConnection] = {}
        self._lock = threading.RLock()  # one exchange at a time: a connection has one reader

    def close(self) -> None:
        """Close the view's sockets (a later call opens new ones)."""
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.close()

    # -- queues ----------------------------------------------------------------------------
    def queues(
        self, topics: Iterable[str] = (), pattern: str | None = None, assign: dict[str, tuple[int, ...]] | None = None
    ) -> list[MessageQueue]:
        """Readable queues of ``topics``, of the topics matching ``pattern``, or the assigned ones."""
        topics = list(topics)
        if pattern is not None:
            regex = re.compile(pattern)
            topics = [t for t in self._all_topics() if regex.fullmatch(t) and not is_system_topic(t)]
        if assign is not None:
            queues = []
            for topic, ids in assign.items():
                known = {q.queue_id: q for q in self._topic_queues(topic, must_exist=True)}
                missing = [i for i in ids if i not in known]
                if missing:
                    raise OptionError("assign", f"names queues {missing} that topic {topic} does not have")
                queues += [known[i] for i in ids]
            return queues
        found: list[MessageQueue] = []
        for topic in topics:
            found += self._topic_queues(topic, must_exist=pattern is None)
        return found

    def _topic_queues(self, topic: str, must_exist: bool) -> list[MessageQueue]:
        try:
            return self.route(topic).subscribe_queues()
        except TopicNotExistError:
            if must_exist:
                raise
            return []

    def route(self, topic: str) -> TopicRoute:
        """The topic's route, asked afresh of a NameServer; TopicNotExistError when none knows it."""
        fields = GetRouteInfoRequestHeader(topic).to_fields()
        command, body = self._ask_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, fields, f"route of topic {topic}")
        route = TopicRoute(topic, TopicRouteData.decode(bytes(body)))
        self._routes[topic] = route
        return route

    def _all_topics(self) -> list[str]:
        _, body = self._ask_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}, "topic list")
        return sorted(TopicList.decode(bytes(body)).topic_list)

    def _ask_namesrv(self, code: int, fields: dict[str, str], what: str) -> Answer:
        """One NameServer's answer: each in random order until one answers SUCCESS (TOPIC_NOT_EXIST raises)."""
        last: SparkmqError | None = None
        for address in _RANDOM.sample(self.namesrv_addresses, len(self.namesrv_addresses)):
            try:
                [(command, body)] = self._exchange([([address], code, fields)], NAMESRV_TIMEOUT_S)
                check_response(command, what)
                return command, body
            except TopicNotExistError:
                self._routes.pop(fields.get("topic", ""), None)
                raise
            except SparkmqError as exc:
                last = exc
        assert last is not None
        raise last

    # -- offsets ---------------------------------------------------------------------------
    def max_offsets(self, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        return self._offsets(queues, RequestCode.GET_MAX_OFFSET)

    def min_offsets(self, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        return self._offsets(queues, RequestCode.GET_MIN_OFFSET)

    def _offsets(self, queues: list[MessageQueue], code: int) -> dict[MessageQueue, int]:
        answers = self._per_queue(queues, code, lambda q: TopicQueueRequestHeader(q.topic, q.queue_id).to_fields())
        return {q: _offset(command, f"offset of {q}") for q, (command, _) in zip(queues, answers, strict=True)}

    def committed(self, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        """The group's committed offsets (-1 where none).

        QUERY_CONSUMER_OFFSET alone cannot say "none": like Java's ConsumerManageProcessor, the
        broker answers 0 for a group without an offset while the queue still begins at 0. So we
        first ask each broker (GET_CONSUME_STATS with a blank topic, Java's ``whichTopicByConsumer``)
        which topics the group has offsets for; queues of other topics have none.
        """
        brokers = sorted({q.broker_name for q in queues})
        fields = GetConsumeStatsRequestHeader(self.group, None).to_fields()
        answers = self._exchange(
            [(self._broker_addresses(b, queues), RequestCode.GET_CONSUME_STATS, fields) for b in brokers],
            BROKER_TIMEOUT_S,
        )
        known: dict[str, set[str]] = {}
        for broker, (command, body) in zip(brokers, answers, strict=True):
            check_response(command, f"consume stats of {self.group}")
            known[broker] = {queue.topic for queue in ConsumeStats.decode(bytes(body)).offset_table}
        with_offsets = [q for q in queues if q.topic in known[q.broker_name]]
        answers = self._per_queue(
            with_offsets,
            RequestCode.QUERY_CONSUMER_OFFSET,
            lambda q: QueryConsumerOffsetRequestHeader(self.group, q.topic, q.queue_id).to_fields(),
        )
        found = {
            q: -1 if command.code == ResponseCode.QUERY_NOT_FOUND else _offset(command, f"committed offset of {q}")
            for q, (command, _) in zip(with_offsets, answers, strict=True)
        }
        return {q: found.get(q, -1) for q in queues}

    def offsets_for_timestamp(self, queues: list[MessageQueue], timestamp_ms: int) -> dict[MessageQueue, int]:
        answers = self._per_queue(
            queues,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            lambda q: SearchOffsetRequestHeader(q.topic, q.queue_id, timestamp_ms).to_fields(),
        )
        return {q: _offset(command, f"offset by time of {q}") for q, (command, _) in zip(queues, answers, strict=True)}

    def commit(self, offsets: dict[MessageQueue, int]) -> None:
        """Commit offsets to the group in the broker's offset manager (all sent, the first failure raised)."""
        queues = list(offsets)
        answers = self._per_queue(
            queues,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            lambda q: UpdateConsumerOffsetRequestHeader(self.group, q.topic, q.queue_id, offsets[q]).to_fields(),
        )
        for queue, (command, _) in zip(queues, answers, strict=True):
            check_response(command, f"commit {queue}")

    # -- requests --------------------------------------------------------------------------
    def _per_queue(
        self, queues: list[MessageQueue], code: int, fields: Callable[[MessageQueue], dict[str, str]]
    ) -> list[Answer]:
        requests = [(self._queue_addresses(q), code, fields(q)) for q in queues]
        return self._exchange(requests, BROKER_TIMEOUT_S)

    def _queue_addresses(self, queue: MessageQueue) -> list[str]:
        """Where ``queue``'s offset requests go, best first (the client's ``invoke_queue_broker``):
        the master, then the slaves, which serve reads and take offsets while the master is away."""
        addresses = self._read_addresses(queue.broker_name)
        if not addresses:
            self.route(queue.topic)
            addresses = self._read_addresses(queue.broker_name)
        if not addresses:
            raise RemoteError(f"no known address for broker {queue.broker_name}", retriable=True)
        return addresses

    def _broker_addresses(self, broker_name: str, queues: list[MessageQueue]) -> list[str]:
        return self._queue_addresses(next(q for q in queues if q.broker_name == broker_name))

    def known_read_addresses(self, broker_name: str) -> list[str]:
        """Where ``broker_name``'s queues are read, master first, by the routes already fetched (no request)."""
        return self._read_addresses(broker_name)

    def _read_addresses(self, broker_name: str) -> list[str]:
        for route in self._routes.values():
            addresses = route.read_addresses(broker_name, MASTER_ID)
            if addresses:
                return addresses
        return []

    def _exchange(self, requests: Sequence[Request], timeout_s: float) -> list[Answer]:
        """Each request's answer from the first of its addresses that answers at all.

        The requests for one address are all written, then their answers read. An address that
        cannot be reached (or breaks mid-exchange) hands its requests to their next address; the
        last one's failure raises. Offset queries and updates are idempotent, so sending one again
        after a connection broke under it is safe.
        """
        answers: list[Answer | None] = [None] * len(requests)
        tried = [0] * len(requests)
        pending = list(range(len(requests)))
        with self._lock:
            while pending:
                by_address: dict[str, list[int]] = {}
                for i in pending:
                    by_address.setdefault(requests[i][0][tried[i]], []).append(i)
                pending = []
                for address, indexes in by_address.items():
                    try:
                        got = self._round_trip(address, [requests[i][1:] for i in indexes], timeout_s)
                    except PullConnectionError:
                        for i in indexes:
                            tried[i] += 1
                            if tried[i] == len(requests[i][0]):
                                raise
                        pending += indexes
                        continue
                    for i, answer in zip(indexes, got, strict=True):
                        answers[i] = answer
        return [answer for answer in answers if answer is not None]

    def _round_trip(self, address: str, items: list[tuple[int, dict[str, str]]], timeout_s: float) -> list[Answer]:
        for attempt in (1, 2):
            connection, reused = self._connection(address, timeout_s)
            try:
                opaques = [connection.send_request(code, fields) for code, fields in items]
                return [connection.answer(opaque) for opaque in opaques]
            except PullConnectionError:
                self._connections.pop(address, None)
                connection.close()
                if not reused or attempt == 2:  # a kept socket may have been closed by the broker meanwhile
                    raise
        raise AssertionError("unreachable")

    def _connection(self, address: str, timeout_s: float) -> tuple[PullConnection, bool]:
        """The kept socket to ``address`` if still open, else a new one; and whether it was kept."""
        kept = self._connections.pop(address, None)
        if kept is not None and kept.usable and kept.alive():
            self._connections[address] = kept
            return kept, True
        if kept is not None:
            kept.close()
        connection = self._connections[address] = PullConnection(address, self._security, timeout_s)
        return connection, False


def _offset(command: RemotingCommand, what: str) -> int:
    return OffsetResponseHeader.from_fields(check_response(command, what).ext_fields).offset


_cache: ViewCache[DriverView] = ViewCache(DriverView, DriverView.close)


def driver_view_for(namesrv_addr: str, group: str, security: ClientSecurity | None = None) -> DriverView:
    """The process's driver view of a cluster for ``group`` (created once; its sockets are kept)."""
    return _cache.get(namesrv_addr, group, security)
