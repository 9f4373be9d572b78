"""Tag filtering: a subscription expression (``"TagA || TagB"``, ``"*"``) as tag hash codes."""

from __future__ import annotations

from sparkmq.errors import SparkmqError
from sparkmq.message.hashing import java_string_hash

SUBSCRIPTION_PARSE_FAILED = 23
SUB_ALL = "*"


class SubscriptionParseError(SparkmqError):
    """SUBSCRIPTION_PARSE_FAILED: the expression cannot be used."""

    code = SUBSCRIPTION_PARSE_FAILED


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """The tags of an expression, or None for "all" (``*`` or empty).

    >>> sorted(parse_tags("TagA || TagB"))
    ['TagA', 'TagB']
    >>> parse_tags("*") is None
    True
    """
    if expression is None or not expression.strip() or expression.strip() == SUB_ALL:
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    if not tags:
        raise SubscriptionParseError(f"subscription expression {expression!r} names no tag")
    return tags


def tag_codes(expression: str | None, expression_type: str | None = "TAG") -> frozenset[int] | None:
    """ConsumeQueue tag codes matching ``expression`` (None = everything)."""
    if expression_type not in (None, "", "TAG"):
        raise SubscriptionParseError(f"expression type {expression_type!r} is not supported yet (only TAG)")
    tags = parse_tags(expression)
    return None if tags is None else frozenset(java_string_hash(t) for t in tags)
