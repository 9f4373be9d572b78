"""The native send lane: plain SEND_MESSAGE_V2, SEND_MESSAGE (the C++ client's) and SEND_BATCH_MESSAGE
(the Java client's batches) requests served straight from a read's bytes.

``sparkmq.native._sendlane.scan`` takes the leading run of a read's frames that are plain sends (JSON
header, no compressed batch, delay, transaction, retry/DLQ topic, or text the reference decoder treats
specially) and encodes their CommitLog records (a batch: one per item), tags codes and index keys in C. This module
keeps what needs the broker's state, once per topic of the group rather than once per request:
the topic's name check, its existence and write permission, the queue id range; then the store's
lock and append (``MessageStore.put_lane_group``), the statistics, and one write of every
response (encoded in C from a template this module renders with ``RemotingCommand``).

Whatever the lane does not take, the usual path (``SendProcessor``) serves, with identical
results: the lane stops before the first request it would refuse or cannot take, and gives
the whole run back when the store cannot take it (SYNC flush, a full segment, writes refused).
tests/native/ checks the bytes against the Python encoders and the broker's answers both ways.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from types import ModuleType
from typing import TYPE_CHECKING

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.put_codes import PUT_STATUS_TO_RESPONSE
from sparkmq.broker.topics import check_sendable
from sparkmq.errors import InvalidTopicError
from sparkmq.message.msgid import ipv4_bytes, offset_msg_ids
from sparkmq.message.record import Host
from sparkmq.protocol import MAX_FRAME_BYTES, PermName, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import send_response_fields
from sparkmq.protocol.namesrv_bodies import TopicConfig
from sparkmq.remoting import RemotingConnection
from sparkmq.store import PutMessageStatus, PutResult
from sparkmq.store.config import FlushDiskType

if TYPE_CHECKING:
    from sparkmq.native._sendlane import SendGroup

logger = logging.getLogger(__name__)

#: At most this many requests per scan (``MAX_IN_FLIGHT_REQUESTS``: a read's worth).
LANE_MAX_REQUESTS = 1024
_SEND, _SUCCESS = int(RequestCode.SEND_MESSAGE_V2), int(ResponseCode.SUCCESS)  # no enum lookups per read
_LIMITS_CACHED = 10_000  # topics whose queue limit the lane remembers
_BORN_HOST = "send.born_host"  # the connection attribute SendProcessor keeps the peer in, shared
_SCAN_ARGS = "send.lane_scan_args"  # the connection attribute the lane keeps its scan arguments in

# Values no real response holds, replaced by each request's own when the responses are encoded.
_OPAQUE, _QUEUE_ID, _QUEUE_OFFSET, _MSG_ID = 2147480007, 2147480011, 9007199254740013, "MSGIDSENTINEL1F3A"

ResponseParts = tuple[bytes, bytes, bytes, bytes, bytes]


def response_template(region_id: str, trace_on: bool) -> ResponseParts | None:
    """The JSON header of a send's SUCCESS response cut around its opaque, msgId, queueId and
    queueOffset, rendered by ``RemotingCommand`` itself (None if the cut is ambiguous)."""
    fields = send_response_fields(_MSG_ID, _QUEUE_ID, _QUEUE_OFFSET, region_id, trace_on)
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, _OPAQUE)
    header = request.make_response(ResponseCode.SUCCESS, ext_fields=fields).encode()[8:]
    parts = cut_around(header, (_OPAQUE, _MSG_ID, _QUEUE_ID, _QUEUE_OFFSET))
    return None if parts is None else (parts[0], parts[1], parts[2], parts[3], parts[4])


def cut_around(header: bytes, sentinels: tuple[object, ...]) -> list[bytes] | None:
    """``header`` cut at each sentinel's text, in order (one more part than sentinels), or None when a
    sentinel is not there exactly once: the pieces a lane joins around each request's own values.

    >>> cut_around(b'{"a":7,"b":"XY"}', (7, "XY"))
    [b'{"a":', b',"b":"', b'"}']
    """
    parts: list[bytes] = []
    rest = header
    for value in sentinels:
        needle = str(value).encode()
        if header.count(needle) != 1:
            return None
        before, rest = rest.split(needle)
        parts.append(before)
    parts.append(rest)
    return parts


class SendLane:
    """The lane the remoting server calls with each read's buffer (``RemotingServer.lane``)."""

    def __init__(self, context: BrokerContext, native: ModuleType, parts: ResponseParts) -> None:
        self.ctx = context
        self._scan = native.scan
        store = context.store.config
        self._store_ip, self._store_port = store.store_host.ip, store.store_host.port
        self._max_message_bytes = store.max_message_bytes
        self._parts = parts
        self._merge = native.merge
        # SYNC flush answers each connection after the flush covering it: its groups stay apart
        self._async_flush = store.flush_disk_type is not FlushDiskType.SYNC_FLUSH
        self._limits: dict[str, tuple[TopicConfig | None, int]] = {}  # topic -> (its config, its limit)

    def __call__(self, buffer: bytes | bytearray, position: int, connection: RemotingConnection) -> int:
        """Serve the plain sends at ``buffer[position:]``; the position after the last one served."""
        start = time.perf_counter()
        prepared = self.prepare(buffer, position, connection)
        if prepared is None:
            return position
        group, end = prepared
        placed = self.ctx.store.put_lane_group(group)
        if placed is None:
            return position
        ha = self.ctx.ha
        try:  # stored: these frames are never served again, whatever happens next
            if not group.waits or (placed[2] is None and (ha is None or not ha.sync_master)):  # _answer's first branch
                connection.write_frame(group.responses(self._parts, self._store_ip, self._store_port), at_once=True)
                elapsed_ms = (time.perf_counter() - start) * 1000
                self.ctx.stats.rpc_many(group.code, _SUCCESS, elapsed_ms, group.count, group.topic_stats)
            else:
                self._answer(group, placed[0] + group.record_bytes, placed[2], connection, start)
        except Exception:  # noqa: BLE001 - a bug here must not store the same sends twice
            logger.exception("answering %d stored sends failed", group.count)
        return end

    def prepare(
        self, buffer: bytes | bytearray, position: int, connection: RemotingConnection
    ) -> tuple[SendGroup, int] | None:
        """The leading plain sends at ``buffer[position:]`` the lane would serve, encoded but not
        stored, and the position after them (None: none); ``serve`` stores and answers them."""
        ha = self.ctx.ha
        if ha is not None and ha.in_sync_refusal() is not None:  # refused unstored: the usual path answers
            return None
        args = connection.attributes.get(_SCAN_ARGS)
        if args is None:
            args = connection.attributes[_SCAN_ARGS] = self._scan_args(connection)
        scan = self._scan
        group = scan(buffer, position, LANE_MAX_REQUESTS, *args)
        if group is None:
            return None
        stop = group.first_refused(self._queue_limits(group.topics))
        if stop < group.count:  # the refused request and all after it go the usual way
            if stop == 0:
                return None
            group = scan(buffer, position, stop, *args)
        return group, int(group.end)

    def serve(self, prepared: list[tuple[RemotingConnection, SendGroup]]) -> bool:
        """Store the groups ``prepare`` gave for several connections (one read each, one event-loop
        turn) as one put, and answer each connection; False with nothing stored when the store
        declines them together (the caller then serves each connection's frames the usual way)."""
        start = time.perf_counter()
        groups = [group for _connection, group in prepared]
        apart = not self._async_flush or self._replicated()  # each connection answered once its group is durable
        merged = self._merge(groups) if not apart and len(groups) > 1 else None
        placed = self.ctx.store.put_lane_groups(groups if merged is None else [merged])
        if placed is None:
            return False
        if merged is None:
            for (connection, group), (at, _bases, flushed) in zip(prepared, placed, strict=True):
                try:  # stored: these frames are never served again, whatever happens next
                    self._answer(group, at + group.record_bytes, flushed, connection, start)
                except Exception:  # noqa: BLE001 - a bug here must not store the same sends twice
                    logger.exception("answering %d stored sends failed", group.count)
            return True
        # One group for the turn (ASYNC flush: answered now): each connection's answers are its range of it.
        parts, store_ip, store_port, first = self._parts, self._store_ip, self._store_port, 0
        for connection, group in prepared:
            stop = first + group.count
            try:  # stored: these frames are never served again, whatever happens next
                connection.write_frame(merged.responses(parts, store_ip, store_port, first, stop), at_once=True)
            except Exception:  # noqa: BLE001 - a bug here must not store the same sends twice
                logger.exception("answering %d stored sends failed", group.count)
            first = stop
        elapsed_ms = (time.perf_counter() - start) * 1000
        self.ctx.stats.rpc_many(merged.code, _SUCCESS, elapsed_ms, merged.count, merged.topic_stats)
        return True

    def _scan_args(self, connection: RemotingConnection) -> tuple[int, int, bytes, int, bytes, int]:
        """What ``scan`` needs besides the buffer, the same for every read of ``connection``."""
        host = connection.attributes.get(_BORN_HOST)
        if host is None:
            host = connection.attributes[_BORN_HOST] = Host(ipv4_bytes(connection.peer[0]), connection.peer[1])
        return MAX_FRAME_BYTES, self._max_message_bytes, host.ip, host.port, self._store_ip, self._store_port

    def _replicated(self) -> bool:
        """A SYNC_MASTER: a send that waits is answered once a replica holds it."""
        ha = self.ctx.ha
        return ha is not None and ha.sync_master

    def _answer(
        self,
        group: SendGroup,
        end: int,
        flushed: concurrent.futures.Future[int] | None,
        connection: RemotingConnection,
        start: float,
    ) -> None:
        """Count ``group`` (stored up to CommitLog offset ``end``) and answer it: now, or once
        ``flushed`` covers it (SYNC flush) and a replica holds it (SYNC_MASTER)."""
        stats = self.ctx.stats
        if not group.waits or (flushed is None and not self._replicated()):  # the answers first: counted meanwhile
            connection.write_frame(group.responses(self._parts, self._store_ip, self._store_port))
            elapsed_ms = (time.perf_counter() - start) * 1000
            stats.rpc_many(group.code, _SUCCESS, elapsed_ms, group.count, group.topic_stats)
        else:  # one wait for the group, then its answers (as BrokerContext.put_group waits)
            for topic, messages, size in group.topic_stats:
                stats.put(topic, messages, size)
            connection.write_when_done(asyncio.ensure_future(self._after_durable(group, end, flushed, start)))

    async def _after_durable(
        self, group: SendGroup, end: int, flushed: concurrent.futures.Future[int] | None, start: float
    ) -> bytes:
        """The group's response frames once its flush is done and a replica holds it, or what a
        timed-out or failed flush or replication makes each waiting send answer (as the group path)."""
        host = self.ctx.store.config.store_host
        outcome = PutResult(PutMessageStatus.PUT_OK, "", store_host=host)
        if flushed is not None:
            outcome = (await self.ctx.flushed([outcome], [True], flushed))[0]
        if self.ctx.ha is not None:
            outcome = await self.ctx.ha.confirm_run(outcome, end)
        ok = outcome.status is PutMessageStatus.PUT_OK
        frames = group.responses(self._parts, self._store_ip, self._store_port) if ok else self._failed(group, outcome)
        elapsed_ms = (time.perf_counter() - start) * 1000
        code = ResponseCode.SUCCESS if ok else PUT_STATUS_TO_RESPONSE[outcome.status]
        self.ctx.stats.rpc_many(group.code, code, elapsed_ms, group.count)
        return frames

    def _failed(self, group: SendGroup, outcome: PutResult) -> bytes:
        """Each send's answer after its flush failed: ``outcome`` for those that waited, SUCCESS for the rest."""
        cfg, host, frames = self.ctx.config, self.ctx.store.config.store_host, []
        for opaque, physical, queue_id, queue_offset, waits in group.answers():
            request = RemotingCommand.request(group.code, opaque)
            code = PUT_STATUS_TO_RESPONSE[outcome.status] if waits else ResponseCode.SUCCESS
            if waits and outcome.store_host is None:
                response = request.make_response(code, remark=outcome.remark or outcome.status.value)
            else:
                msg_ids = offset_msg_ids(host.ip, host.port, physical)
                fields = send_response_fields(msg_ids, queue_id, queue_offset, cfg.region_id, cfg.trace_on)
                response = request.make_response(code, ext_fields=fields)
            frames.append(response.encode())
        return b"".join(frames)

    def _queue_limits(self, topics: list[str]) -> list[int]:
        """Each topic's ``_queue_limit``, worked out again only when its (frozen) config changed."""
        configs, known, limits = self.ctx.topics.topics, self._limits, []
        for topic in topics:
            config = configs.get(topic)
            cached = known.get(topic)
            if cached is None or cached[0] is not config:
                if len(known) >= _LIMITS_CACHED:  # deleted and renamed topics do not pile up
                    known.clear()
                cached = known[topic] = (config, self._queue_limit(topic, config))
            limits.append(cached[1])
        return limits

    @staticmethod
    def _queue_limit(topic: str, config: TopicConfig | None) -> int:
        """Queue ids of ``topic`` the lane may store to are below this (-1: the topic is not the lane's)."""
        try:
            check_sendable(topic)
        except InvalidTopicError:
            return -1
        if config is None or not config.perm & PermName.PERM_WRITE:  # created on send: by the usual path
            return -1
        return max(config.write_queue_nums, config.read_queue_nums)


def send_lane(context: BrokerContext, native: ModuleType | None) -> SendLane | None:
    """The lane for ``context``'s broker, or None without the extension (the Python path serves all)."""
    if native is None:
        return None
    parts = response_template(context.config.region_id, context.config.trace_on)
    return None if parts is None else SendLane(context, native, parts)
