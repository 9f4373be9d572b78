"""What a pop asks and how it selects: the request, a subscription's test of a message, a FIFO message's group.

>>> tags_selector(["*"]) is None
True
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkmq.broker.filtering import SQL92, is_tag_type, parse_tags
from sparkmq.errors import PropertyFilterDisabledError, SubscriptionParseError
from sparkmq.message.properties import SHARDING_KEY, TAGS
from sparkmq.message.record import StoredMessage

if TYPE_CHECKING:
    from sparkmq.broker.sql92 import Sql92Selector

Selector = Callable[[StoredMessage], bool]


@dataclass(frozen=True, slots=True)
class PopRequest:
    """What a pop asks: up to ``max_nums`` messages of ``topic`` for ``group``, invisible for ``invisible_ms``.

    ``queue_id`` None: any queue; ``selector``: the subscription's test of a message (None: all); ``init_max``: a
    group without an offset starts at the end (initMode MAX); ``attempt_id``: the client's name of this receive."""

    group: str
    topic: str
    max_nums: int
    invisible_ms: int
    fifo: bool = False
    selector: Selector | None = None
    queue_id: int | None = None
    init_max: bool = False
    attempt_id: str = ""

    def accepts(self, message: StoredMessage) -> bool:
        return self.selector is None or self.selector(message)


def tags_selector(tags: Collection[str] | None) -> Selector | None:
    """A TAG subscription's test (None: every message)."""
    if tags is None or "*" in tags:
        return None
    wanted = frozenset(tags)
    return lambda message: message.properties.get(TAGS, "") in wanted


def subscription_selector(expression_type: str | None, expression: str | None, sql_enabled: bool) -> Selector | None:
    """A POP subscription's test of a message: TAG (``a||b``, ``*``) or SQL92 over its properties (with
    ``enablePropertyFilter``, as for pulls); SubscriptionParseError or PropertyFilterDisabledError say why not."""
    if is_tag_type(expression_type):
        return tags_selector(parse_tags(expression))
    if expression_type != SQL92:
        raise SubscriptionParseError(f"expression type {expression_type!r} is not supported (TAG or SQL92)")
    if not sql_enabled:
        raise PropertyFilterDisabledError(f"The broker does not support consumer to filter message by {SQL92}")
    sql = _compiled_sql92(expression or "")
    return lambda message: sql.matches(message.properties)


@functools.lru_cache(maxsize=256)  # one parse per subscription, not per receive
def _compiled_sql92(expression: str) -> Sql92Selector:
    from sparkmq.broker.sql92 import compile_sql92  # lark is loaded only by brokers that filter by SQL92

    return compile_sql92(expression)


def message_group_of(message: StoredMessage) -> str:
    """A FIFO message's message group: its ``__SHARDINGKEY``; "" (the whole queue) when it names none."""
    return message.properties.get(SHARDING_KEY, "")
