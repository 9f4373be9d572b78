"""Topics as Delta tables, on the broker's side: the table writer's composition and SPARKMQ_TABLE_STATUS.

``sparkmq.tables`` (pyarrow, deltalake) is imported only when broker.conf sets ``tableTopicRoot``,
so a broker without tables never loads them.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from sparkmq.broker.topics import TopicConfigManager
from sparkmq.errors import InvalidFieldError
from sparkmq.protocol import RemotingCommand, ResponseCode
from sparkmq.protocol.admin_headers import TopicRequestHeader
from sparkmq.protocol.table_bodies import TableQueueStatus, TableStatusBody
from sparkmq.tables.attributes import TableSettings

if TYPE_CHECKING:
    from sparkmq.broker.context import BrokerContext
    from sparkmq.remoting import RemotingConnection
    from sparkmq.tables.materializer import Materializer

logger = logging.getLogger(__name__)


def table_settings(topics: TopicConfigManager) -> dict[str, TableSettings]:
    """The topics whose attributes enable a table, with their settings (a topics.json edited into
    a bad value is logged and left without a table)."""
    enabled = {}
    for config in list(topics.topics.values()):
        if not config.attributes:
            continue
        try:
            settings = TableSettings.of(config.attribute_map)
        except InvalidFieldError as exc:
            logger.error("topic %s gets no table: its attributes are wrong: %s", config.topic_name, exc)
            continue
        if settings.enabled:
            enabled[config.topic_name] = settings
    return enabled


def start_materializer(ctx: BrokerContext) -> Materializer | None:
    """The running table writer when ``tableTopicRoot`` is set, its retention hold installed.

    It writes only while the broker is a master (a controller may change the role at any time).
    """
    config = ctx.config
    if not config.table_topic_root:
        return None
    from sparkmq.tables.materializer import Materializer

    writer = Materializer(
        ctx.store,
        config.broker_name,
        config.table_topic_root,
        config.table_topic_commit_interval_ms / 1000,
        lambda: {} if ctx.config.is_slave else table_settings(ctx.topics),
        upkeep_interval_s=config.table_topic_compact_interval_ms / 1000,
        vacuum_retention_hours=config.table_topic_vacuum_retention_hours,
        storage_options=config.table_storage_options(),
        replicated=lambda: _replicated(ctx),
    )
    ctx.store.retention.keep_from = writer.retention_floor
    writer.start()
    logger.info("topics as tables: writing under %s", config.table_topic_root)
    return writer


def _replicated(ctx: BrokerContext) -> float:
    """The CommitLog offset a failover keeps: what the replicas confirmed on a master whose sends wait
    for them (as ``HAService.confirm`` does), else everything (``inf``)."""
    ha = ctx.ha
    if ha is None or not (ha.sync_master or ctx.config.enable_controller_mode):
        return math.inf
    try:
        return ha.acks.confirmable()
    except RuntimeError:  # a replica linked or left while this thread read the table of them: next cycle
        return 0


def table_status_body(writer: Materializer, topic: str) -> TableStatusBody | None:
    """The last cycle's status of ``topic``'s table (state ``starting`` before its first), None if not enabled."""
    if topic not in writer.settings():
        return None
    status = writer.statuses.get(topic)
    if status is None:
        return TableStatusBody(topic, "", "starting", "the first cycle has not run yet", -1)
    queues = tuple(
        TableQueueStatus(q.queue_id, q.table_offset, q.min_offset, q.max_offset, round(q.lag_seconds, 3))
        for q in status.queues
    )
    return TableStatusBody(topic, status.uri, status.state, status.reason, status.table_version, queues)


class TableStatusProcessor:
    """SPARKMQ_TABLE_STATUS: ``topic`` in the header; the body is a :class:`TableStatusBody`."""

    def __init__(self, topics: TopicConfigManager, writer: Materializer | None) -> None:
        self.topics, self.writer = topics, writer

    async def __call__(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = TopicRequestHeader.from_fields(request.ext_fields)
        if self.topics.get(h.topic) is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{h.topic}] not exist")
        if self.writer is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, remark="this broker writes no tables: set tableTopicRoot in broker.conf"
            )
        body = table_status_body(self.writer, h.topic)
        if body is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"topic {h.topic} has no table: updateTopic -t {h.topic} -a +table.enable=true",
            )
        return request.make_response(body=body.encode())
