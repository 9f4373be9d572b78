"""PULL_MESSAGE (11) with long polling.

Reads up to ``maxMsgNums`` records from the store as one body of whole stored records
(what both real clients decode). When nothing is there and the client allows suspension,
the pull parks until a message arrives on its queue or ``suspendTimeoutMillis`` passes.
"""

from __future__ import annotations

from collections.abc import Awaitable

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.filtering import MessageFilter, resolve
from sparkmq.broker.ha.reads import WHICH_BROKER_WHEN_CONSUME_SLOWLY, advise, in_memory_bytes
from sparkmq.broker.validation import check_topic
from sparkmq.errors import SparkmqError
from sparkmq.message.names import MASTER_ID
from sparkmq.protocol import PermName, PullSysFlag, RemotingCommand, ResponseCode
from sparkmq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from sparkmq.remoting import RemotingConnection
from sparkmq.remoting.connection import WRITE_HIGH_WATER_BYTES, Answer
from sparkmq.remoting.serving import error_response
from sparkmq.store import GetMessageStatus, GetResult

MAX_SUSPEND_S = 25.0  # clients give up at 30 s; answer well before
MAX_PULL_BYTES = 8 * 1024 * 1024  # a pull body stays well under the 16 MiB frame limit
_COMMIT_OFFSET, _SUBSCRIPTION = int(PullSysFlag.COMMIT_OFFSET), int(PullSysFlag.SUBSCRIPTION)
_MAX_READY = 4096  # cached lane checks; cleared when full (names come from clients)
#: PullMessageRequestHeader's fields, in order, as the native lane parses them.
LaneFields = tuple[str, str, int, int, int, int, int, int, int, str | None, str | None]
#: The PULL SUCCESS header template around opaque, suggestWhichBrokerId and the three offsets.
PullParts = tuple[bytes, bytes, bytes, bytes, bytes, bytes]
_ReadyKey = tuple[str, str, int, str | None, str | None]


class _Ready:
    """A lane pull's checks that passed: valid while the versions and the heartbeat's subscription hold."""

    __slots__ = ("heartbeat", "own_subscription", "queue_bound", "tags_codes", "versions")

    def __init__(
        self,
        versions: tuple[int, int, bool],
        own_subscription: bool,
        heartbeat: object,
        queue_bound: int,
        tags_codes: frozenset[int] | None,
    ) -> None:
        self.versions, self.own_subscription, self.heartbeat = versions, own_subscription, heartbeat
        self.queue_bound, self.tags_codes = queue_bound, tags_codes

    def holds(self, ctx: BrokerContext, group: str, topic: str) -> bool:
        """Whether the checks still pass as they did (the filter may come from the heartbeat)."""
        if self.versions != (ctx.topics.version, ctx.groups.version, ctx.config.enable_property_filter):
            return False
        return self.own_subscription or ctx.clients.subscription(group, topic) is self.heartbeat


def response_code(status: GetMessageStatus, requested_offset: int) -> ResponseCode:
    """RocketMQ's mapping of GetMessageStatus to a PULL response code (``PullMessageProcessor``)."""
    if status is GetMessageStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status in (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.OFFSET_OVERFLOW_ONE):
        return ResponseCode.PULL_NOT_FOUND
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL


class PullProcessor:
    """Serves PULL_MESSAGE for one broker.

    A pull is answered synchronously (no Task) unless it parks for long polling; the pulls
    decoded from one read come in together through ``serve_group``.
    """

    def __init__(self, context: BrokerContext) -> None:
        self.ctx = context
        self._ready: dict[_ReadyKey, _Ready] = {}

    async def __call__(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        answer = self._serve(request, connection)
        return answer if isinstance(answer, RemotingCommand) else await answer

    def serve_group(self, requests: list[RemotingCommand], connection: RemotingConnection) -> list[Answer]:
        """Answer each pull: its response now, or an awaitable of it while it parks.

        Once the peer is behind (``backlogged``) or this group's responses reach the write
        high-water mark, the rest are left unstarted: the connection builds their responses, up to
        ~1 MiB each, only when the peer reads again (a peer that never reads costs bounded memory).
        """
        answers: list[Answer] = []
        produced = 0
        for request in requests:
            if produced >= WRITE_HIGH_WATER_BYTES or connection.backlogged:
                answers.append(self(request, connection))
                continue
            try:
                answer = self._serve(request, connection)
            except Exception as exc:  # noqa: BLE001 - one request's failure is its own answer
                answer = error_response(request, exc, connection.peer)
            if isinstance(answer, RemotingCommand):
                produced += len(answer.body)
            answers.append(answer)
        return answers

    def _serve(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        header = PullMessageRequestHeader.from_fields(request.ext_fields)
        refusal = self._refusal(header, connection)
        if refusal is not None:
            return request.make_response(refusal[0], remark=refusal[1])
        message_filter = self._filter(header)
        result = self._commit_and_read(header, message_filter)
        code = response_code(result.status, header.queue_offset)
        flags = PullSysFlag(header.sys_flag)
        if code is ResponseCode.PULL_NOT_FOUND and PullSysFlag.SUSPEND in flags and header.suspend_timeout_millis > 0:
            timeout = min(header.suspend_timeout_millis / 1000, MAX_SUSPEND_S)
            if not self.ctx.config.long_polling_enable:
                timeout = min(timeout, self.ctx.config.short_polling_time_mills / 1000)
            return self._held(request, header, message_filter, timeout)
        return self._response(request, header, code, result)

    def serve_frame(
        self, opaque: int, fields: LaneFields, parts: PullParts, out: bytearray, reserve: int
    ) -> int | None:
        """A pull answered with records, as ``_serve`` would answer it: its encoded SUCCESS frame
        (header from ``parts``, pull_lane's template) appended to ``out`` (grown to at least
        ``reserve`` bytes if it lacks room), and out's new length; None (nothing done but a
        repeatable offset commit) when its answer would be anything else: the native pull lane
        leaves those to ``_serve``.

        ``fields`` are ``PullMessageRequestHeader``'s. The checks that depend only on the group, the
        topic and the subscription are cached until the topics, groups or heartbeat change.
        """
        group, topic, queue_id, queue_offset, max_msg_nums, sys_flag, commit_offset, _, _, sub, expr_type = fields
        ctx, config = self.ctx, self.ctx.config
        key = (group, topic, sys_flag & _SUBSCRIPTION, sub, expr_type)
        ready = self._ready.get(key)
        if ready is None or not ready.holds(ctx, group, topic):
            ready = self._check(fields, key)
            if ready is None:
                return None
        if not 0 <= queue_id < ready.queue_bound:
            return None
        if sys_flag & _COMMIT_OFFSET and commit_offset >= 0 and not config.is_slave:
            ctx.offsets.commit(group, topic, queue_id, commit_offset)
        store = ctx.store
        slow_below = store.commitlog.max_offset - in_memory_bytes(config) if config.slave_read_enable else 0
        read = store.read_frame(
            topic,
            queue_id,
            queue_offset,
            min(max_msg_nums, config.max_transfer_count_on_message_in_memory),
            min(config.max_transfer_bytes_on_message_in_memory, MAX_PULL_BYTES),
            ready.tags_codes,
            (parts, opaque, MASTER_ID, WHICH_BROKER_WHEN_CONSUME_SLOWLY, slow_below),
            out,
            reserve,
        )
        if read is None:
            return None
        end, count, size = read
        ctx.stats.get(group, topic, count, size)
        assert isinstance(end, int)
        return end

    def _check(self, fields: LaneFields, key: _ReadyKey) -> _Ready | None:
        """``_serve``'s checks and filter for a lane pull, cached under ``key``; None if it would be
        answered otherwise (refused, a bad subscription, a SQL92 filter)."""
        header = PullMessageRequestHeader(*fields)
        ctx = self.ctx
        versions = (ctx.topics.version, ctx.groups.version, ctx.config.enable_property_filter)
        try:
            if self._refusal(header, None) is not None:
                return None
            message_filter = self._filter(header)
        except SparkmqError:  # a bad name or subscription: _serve answers it
            return None
        topic = ctx.topics.get(header.topic)
        if message_filter.record_filter is not None or topic is None:
            return None
        own = bool(key[2])
        heartbeat = None if own else ctx.clients.subscription(header.consumer_group, header.topic)
        bound = max(topic.read_queue_nums, topic.write_queue_nums)
        if len(self._ready) >= _MAX_READY:
            self._ready.clear()
        ready = self._ready[key] = _Ready(versions, own, heartbeat, bound, message_filter.tags_codes)
        return ready

    def _refusal(
        self, header: PullMessageRequestHeader, connection: RemotingConnection | None
    ) -> tuple[ResponseCode, str] | None:
        """Why the pull is refused before reading (code, remark), or None."""
        ctx = self.ctx
        check_topic(header.topic)
        group = ctx.groups.find_or_create(header.consumer_group)
        if group is None:
            return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, ctx.groups.refusal(header.consumer_group)
        if not group.consume_enable:
            return ResponseCode.NO_PERMISSION, f"subscription group no permission, {header.consumer_group}"
        topic = ctx.topics.get(header.topic)
        if topic is None:
            return ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!"
        if not topic.perm & PermName.PERM_READ:
            return ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] pulling message is forbidden"
        if not 0 <= header.queue_id < max(topic.read_queue_nums, topic.write_queue_nums):
            return ResponseCode.SYSTEM_ERROR, (
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] topicConfig.readQueueNums:"
                f"[{topic.read_queue_nums}] consumer:[{connection.peer[0] if connection else ''}]"
            )
        return None

    def _commit_and_read(self, header: PullMessageRequestHeader, message_filter: MessageFilter) -> GetResult:
        ctx, flags = self.ctx, PullSysFlag(header.sys_flag)
        if PullSysFlag.COMMIT_OFFSET in flags and header.commit_offset >= 0 and not ctx.config.is_slave:
            ctx.offsets.commit(header.consumer_group, header.topic, header.queue_id, header.commit_offset)
        return self._read(header, message_filter)

    async def _held(
        self, request: RemotingCommand, header: PullMessageRequestHeader, message_filter: MessageFilter, timeout: float
    ) -> RemotingCommand:
        """Park the pull until its queue grows or ``timeout`` passes, then read again."""
        await self.ctx.holds.wait(header.topic, header.queue_id, header.queue_offset, timeout)
        result = self._read(header, message_filter)
        return self._response(request, header, response_code(result.status, header.queue_offset), result)

    def _response(
        self, request: RemotingCommand, header: PullMessageRequestHeader, code: ResponseCode, result: GetResult
    ) -> RemotingCommand:
        """The answer, with the replication advice (suggestWhichBrokerId) and the get counted."""
        ctx = self.ctx
        advice = advise(ctx.config, ctx.store.commitlog.max_offset, result, code, header.queue_offset)
        fields = PullMessageResponseHeader(
            advice.suggest_which_broker_id, advice.next_begin_offset, result.min_offset, result.max_offset
        ).to_fields()
        if advice.code is ResponseCode.SUCCESS:
            body = result.body()
            ctx.stats.get(header.consumer_group, header.topic, result.message_count, len(body))
            return request.make_response(advice.code, ext_fields=fields, body=body)
        return request.make_response(advice.code, remark=result.status.value, ext_fields=fields)

    def _filter(self, header: PullMessageRequestHeader) -> MessageFilter:
        """The pull's own subscription (FLAG_SUBSCRIPTION), else the one the group's heartbeat sent."""
        enabled = self.ctx.config.enable_property_filter
        if PullSysFlag.SUBSCRIPTION in PullSysFlag(header.sys_flag):
            return resolve(header.subscription, header.expression_type, enabled)
        subscription = self.ctx.clients.subscription(header.consumer_group, header.topic)
        if subscription is None:
            return MessageFilter()
        return resolve(subscription.sub_string, subscription.expression_type, enabled)

    def _read(self, header: PullMessageRequestHeader, message_filter: MessageFilter) -> GetResult:
        config = self.ctx.config
        return self.ctx.store.get_messages(
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.queue_offset,
            min(header.max_msg_nums, config.max_transfer_count_on_message_in_memory),
            min(config.max_transfer_bytes_on_message_in_memory, MAX_PULL_BYTES),
            message_filter.tags_codes,
            message_filter.record_filter,
        )
