"""The message page's trace section: a message's trace records, as ``queryMsgTraceById`` lists them."""

from __future__ import annotations

import html
from datetime import datetime

from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.trace_data import MESSAGE_TYPES, TraceType
from sparkmq.client.trace_query import message_traces
from sparkmq.errors import SparkmqError
from sparkmq.ops.pages import table

HEADERS = ["Type", "Group", "Client host", "Time", "Cost (ms)", "Status", "Detail"]


def _detail(kind: TraceType, view_topic: str, msg_type: int, state: str, context_code: int) -> str:
    if kind is TraceType.PUB:
        return f"{view_topic} {MESSAGE_TYPES[msg_type]}"
    if kind is TraceType.END_TRANSACTION:
        return state
    if kind is TraceType.SUB_AFTER:
        return f"return type {context_code}"
    return ""


async def trace_section(admin: AdminExt, msg_id: str, trace_topic: str | None) -> str:
    """The traces of ``msg_id`` as a table, a line per damaged trace message; a failed query is a line too."""
    try:
        found = await message_traces(admin, msg_id, trace_topic)
    except SparkmqError as exc:
        return f"<h2>Trace</h2><p class='no-trace'>No trace: {html.escape(exc.remark)}</p>"
    rows = []
    for v in found.views:
        bean = v.context.beans[0]
        at = datetime.fromtimestamp(v.timestamp_ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if v.timestamp_ms else ""
        detail = _detail(v.trace_type, v.topic, bean.msg_type, bean.transaction_state, v.context.context_code)
        rows.append([v.trace_type.value, v.group, v.client_host, at, v.cost_ms, v.status, detail])
    damaged = "".join(
        f"<p class='error damaged'>Damaged trace message {html.escape(trace_id)}: {html.escape(error.remark)}</p>"
        for trace_id, error in found.damaged
    )
    body = table(HEADERS, rows, "trace") if rows else "<p class='no-trace'>No trace records for this message.</p>"
    return f"<h2>Trace</h2>{body}{damaged}"
