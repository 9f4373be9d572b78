"""A message's traces, read from the trace topic by key (``QueryMsgTraceByIdSubCommand`` and ``TraceView``).

Trace messages are indexed by the ids they trace, so a QUERY_MESSAGE by key on the trace topic finds
every trace message naming an id; each is decoded and the records of that id kept. A trace message whose
body does not decode is reported in :attr:`MessageTraces.damaged`, never raised: the others still show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.trace_data import TRACE_TOPIC, TraceContext, TraceType, decode_body
from sparkmq.errors import TraceDataError

QUERY_MAX = 64  # the max number mqadmin's queryMsgTraceById asks for


@dataclass(frozen=True)
class TraceView:
    """One trace record of the queried message (Java's ``TraceView``)."""

    trace_type: TraceType
    group: str
    client_host: str  # the born host of the trace message: where its client ran
    timestamp_ms: int
    cost_ms: int
    success: bool
    topic: str
    tags: str | None
    keys: str | None
    store_host: str
    offset_msg_id: str
    context: TraceContext

    @property
    def status(self) -> str:
        return "success" if self.success else "failed"


@dataclass
class MessageTraces:
    views: list[TraceView] = field(default_factory=list)
    damaged: list[tuple[str, TraceDataError]] = field(default_factory=list)  # (trace message id, error)


def views_of(msg_id: str, contexts: list[TraceContext], client_host: str) -> list[TraceView]:
    """``TraceView.decodeFromTraceTransData``: the records of ``contexts`` about ``msg_id``."""
    views = []
    for ctx in contexts:
        bean = ctx.beans[0]
        if bean.msg_id != msg_id:
            continue
        views.append(
            TraceView(
                ctx.trace_type, ctx.group, client_host, ctx.timestamp_ms, ctx.cost_ms, ctx.success, bean.topic,
                bean.tags, bean.keys, bean.store_host, bean.offset_msg_id, ctx,
            )
        )  # fmt: skip
    return views


async def message_traces(admin: AdminExt, msg_id: str, trace_topic: str | None = None) -> MessageTraces:
    """The trace records of ``msg_id`` in ``trace_topic`` (``RMQ_SYS_TRACE_TOPIC``), oldest first."""
    found = MessageTraces()
    for message in await admin.query_by_key(trace_topic or TRACE_TOPIC, msg_id, max_num=QUERY_MAX):
        try:
            contexts = decode_body(message.body)
        except TraceDataError as exc:
            found.damaged.append((message.msg_id, exc))
            continue
        found.views += views_of(msg_id, contexts, message.born_host.rsplit(":", 1)[0])  # getBornHostString: no port
    found.views.sort(key=lambda v: v.timestamp_ms)
    return found
