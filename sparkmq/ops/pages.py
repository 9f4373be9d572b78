"""HTML building blocks of the dashboard: the page layout and tables (every value escaped)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from starlette.responses import HTMLResponse

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#24292f;background:#f6f8fa}
header{background:#24292f;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:center}
header a{color:#fff;text-decoration:none}header strong{font-size:18px;margin-right:16px}
main{padding:16px 20px}table{border-collapse:collapse;background:#fff;margin:10px 0}
th,td{border:1px solid #d0d7de;padding:4px 10px;text-align:left;font-size:13px}th{background:#eaeef2}
.mode{margin-left:auto;font-size:12px;padding:2px 8px;border-radius:10px;background:#57606a}
.error{color:#cf222e}.chart{display:block;margin:10px 0}
"""
NAV = (("/", "Cluster"), ("/topics", "Topics"), ("/groups", "Consumers"), ("/messages", "Messages"), ("/send", "Send"))


def layout(title: str, body: str, writable: bool, status: int = 200) -> HTMLResponse:
    """A whole page: navigation, the read-only/writable badge, ``body`` (already HTML)."""
    nav = "".join(f'<a href="{href}">{name}</a>' for href, name in NAV)
    mode = "writes allowed" if writable else "read-only"
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)} · sparkmq</title>"
        f"<style>{STYLE}</style></head><body><header><strong>sparkmq</strong>{nav}"
        f"<span class='mode'>{mode}</span></header><main><h1>{html.escape(title)}</h1>{body}</main></body></html>"
    )
    return HTMLResponse(page, status_code=status)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], css_id: str, raw: bool = False) -> str:
    """An HTML table; cells are escaped unless ``raw`` (for cells the caller built from escaped parts)."""

    def cell(value: object) -> str:
        return str(value) if raw else html.escape(str(value))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table id='{css_id}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
