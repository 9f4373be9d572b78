"""Java's text forms that mqadmin prints: permissions, version names, times, TopicConfig.toString."""

from __future__ import annotations

from datetime import datetime
from typing import TextIO

from sparkmq.protocol import MQVersion, PermName
from sparkmq.protocol.namesrv_bodies import TopicConfig


def perm_string(perm: int) -> str:
    """``PermName.perm2String``: 6 → ``RW-``."""
    return (
        ("R" if perm & PermName.PERM_READ else "-")
        + ("W" if perm & PermName.PERM_WRITE else "-")
        + ("X" if perm & PermName.PERM_INHERIT else "-")
    )


def version_desc(version: int) -> str:
    try:
        return MQVersion(version).name
    except ValueError:
        return str(version)


def ms_text(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString2``: ``yyyy-MM-dd HH:mm:ss,SSS``."""
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,") + f"{ms % 1000:03d}"


def topic_config_text(c: TopicConfig) -> str:
    return (
        f"TopicConfig [topicName={c.topic_name}, readQueueNums={c.read_queue_nums}, writeQueueNums="
        f"{c.write_queue_nums}, perm={perm_string(c.perm)}, topicFilterType={c.topic_filter_type}, "
        f"topicSysFlag={c.topic_sys_flag}, order={str(c.order).lower()}"
        + (f", attributes={{{', '.join(f'{k}={v}' for k, v in c.attributes)}}}]" if c.attributes else "]")
    )


def printf(out: TextIO, java_format: str, *args: object) -> None:
    """Java's ``System.out.printf``: the format strings are copied from mqadmin verbatim (``%n`` included)."""
    out.write(java_format.replace("%n", "\n") % args)
