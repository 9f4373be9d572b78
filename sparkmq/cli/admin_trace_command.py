"""``sparkmq admin queryMsgTraceById``: a message's traces, printed as mqadmin's ``QueryMsgTraceByIdSubCommand``.

A Pub block per send record, then a block per consumer group of its SubAfter records. A trace message
that does not decode is named in a ``#Damaged`` line after them; the others still print.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import TextIO

from sparkmq.cli.admin_format import printf
from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.trace_data import TraceType
from sparkmq.client.trace_query import TraceView, message_traces

ROW = "%-10s %-20s %-20s %-20s %-10s %-10s%n"


def _row(out: TextIO, kind: str, view: TraceView) -> None:
    at = datetime.fromtimestamp(view.timestamp_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")  # DateFormatUtils
    printf(out, ROW, kind, view.group, view.client_host, at, f"{view.cost_ms}ms", view.status)


def print_traces(views: list[TraceView], out: TextIO) -> None:
    """``printMessageTrace``: Pub records, then the SubAfter records grouped by consumer group."""
    by_group: dict[str, list[TraceView]] = {}
    for view in views:
        if view.trace_type is TraceType.PUB:
            printf(out, ROW, "#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status")
            _row(out, "Pub", view)
            out.write("\n")
        elif view.trace_type is TraceType.SUB_AFTER:
            by_group.setdefault(view.group, []).append(view)
    for group_views in by_group.values():
        printf(out, ROW, "#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status")
        for view in group_views:
            _row(out, "Sub", view)
        out.write("\n")


async def query_msg_trace_by_id(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    found = await message_traces(admin, args.msgId.strip(), (args.traceTopic or "").strip() or None)
    print_traces(found.views, out)
    for trace_id, error in found.damaged:
        out.write(f"#Damaged trace message {trace_id}: {error.remark}\n")
