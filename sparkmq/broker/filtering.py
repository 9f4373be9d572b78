"""Subscription filters: a TAG expression as ConsumeQueue tag codes, a SQL92 one as a record filter.

>>> sorted(parse_tags("TagA || TagB"))
['TagA', 'TagB']
>>> resolve("*", "TAG", property_filter_enabled=False)
MessageFilter(tags_codes=None, record_filter=None)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparkmq.errors import PropertyFilterDisabledError, SubscriptionParseError
from sparkmq.message.hashing import java_string_hash
from sparkmq.message.properties import decode_properties

SUB_ALL = "*"
TAG = "TAG"
SQL92 = "SQL92"


@dataclass(frozen=True)
class MessageFilter:
    """What a read filters on: tag codes (None = all) and a filter over raw properties (or None)."""

    tags_codes: frozenset[int] | None = None
    record_filter: Callable[[bytes], bool] | None = None


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """The tags of an expression, or None for "all" (``*`` or empty).

    >>> parse_tags("*") is None
    True
    """
    if expression is None or not expression.strip() or expression.strip() == SUB_ALL:
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    if not tags:
        raise SubscriptionParseError(f"subscription expression {expression!r} names no tag")
    return tags


def is_tag_type(expression_type: str | None) -> bool:
    """``ExpressionType.isTagType``: empty or TAG."""
    return expression_type in (None, "", TAG)


def resolve(expression: str | None, expression_type: str | None, property_filter_enabled: bool) -> MessageFilter:
    """The filter of one subscription; raises with RocketMQ's code and remark when it cannot be used."""
    if is_tag_type(expression_type):
        tags = parse_tags(expression)
        return MessageFilter(None if tags is None else frozenset(java_string_hash(t) for t in tags))
    if expression_type != SQL92:
        raise SubscriptionParseError(f"expression type {expression_type!r} is not supported (TAG or SQL92)")
    if not property_filter_enabled:
        raise PropertyFilterDisabledError(
            f"The broker does not support consumer to filter message by {expression_type}"
        )
    from sparkmq.broker.sql92 import compile_sql92  # lark is loaded only by brokers that filter by SQL92

    selector = compile_sql92(expression or "")
    return MessageFilter(None, lambda raw: selector.matches(decode_properties(raw)))
