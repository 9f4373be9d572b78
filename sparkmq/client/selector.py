"""MessageSelector: what a consumer subscribes to, by tags or by a SQL92 expression over properties.

>>> MessageSelector.by_sql("a > 5").expression_type
'SQL92'
>>> sorted(MessageSelector.of("TagA || TagB").tags() or ())
['TagA', 'TagB']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkmq.errors import ConfigError

if TYPE_CHECKING:  # the heartbeat codecs: only clients that heartbeat need them
    from sparkmq.protocol.heartbeat import SubscriptionData

TAG = "TAG"
SQL92 = "SQL92"
SUB_ALL = "*"


@dataclass(frozen=True)
class MessageSelector:
    """A subscription expression and its type (Java's ``MessageSelector``).

    SQL92 selectors are evaluated by the broker, which must run with ``enablePropertyFilter=true``;
    a bad expression fails the consumer's pulls with SUBSCRIPTION_PARSE_FAILED naming the position.
    """

    expression: str = SUB_ALL
    expression_type: str = TAG

    @classmethod
    def by_tag(cls, expression: str = SUB_ALL) -> MessageSelector:
        """Messages whose tag is one of ``"TagA || TagB"`` (``"*"``: every message)."""
        return cls((expression or SUB_ALL).strip() or SUB_ALL, TAG)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        """Messages whose properties satisfy a SQL92 expression, e.g. ``"a BETWEEN 1 AND 5"``."""
        if not expression or not expression.strip():
            raise ConfigError("a SQL92 selector needs an expression")
        return cls(expression.strip(), SQL92)

    @classmethod
    def of(cls, value: str | MessageSelector | None) -> MessageSelector:
        """A selector as given, or a tag expression given as a string."""
        return value if isinstance(value, MessageSelector) else cls.by_tag(value or SUB_ALL)

    def tags(self) -> frozenset[str] | None:
        """The tags a TAG selector names (None: every message, or a SQL92 selector)."""
        if self.expression_type != TAG or self.expression == SUB_ALL:
            return None
        return frozenset(t.strip() for t in self.expression.split("||") if t.strip())

    def subscription_data(self, topic: str) -> SubscriptionData:
        """The subscription as a heartbeat carries it."""
        from sparkmq.protocol.heartbeat import SubscriptionData

        return SubscriptionData(
            topic, self.expression, tuple(sorted(self.tags() or ())), expression_type=self.expression_type
        )
