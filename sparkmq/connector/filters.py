"""Spark filters on ``tags`` pushed to the broker (batch reads: ``DataSourceReader.pushFilters``).

``where tags = 'x'`` and ``where tags IN ('x', 'y')`` become the pull's selector, so the broker
skips other messages by their consume-queue tag hash instead of sending them. The filters are
still handed back to Spark, which re-checks the exact tag on what arrives (a hash can collide).
A stream cannot take pushed filters (the Python Data Source API offers none for streaming
readers); there the ``subExpression`` and ``sqlFilter`` options say the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql.datasource import EqualTo, Filter, In

from sparkmq.client.selector import SQL92, MessageSelector

TAGS_COLUMN = ("tags",)


def _tag_set(spark_filter: Filter) -> frozenset[str] | None:
    """The tags a filter on the ``tags`` column allows, or None when it is not such a filter."""
    if isinstance(spark_filter, EqualTo) and spark_filter.attribute == TAGS_COLUMN:
        values: Sequence[object] = (spark_filter.value,)
    elif isinstance(spark_filter, In) and spark_filter.attribute == TAGS_COLUMN:
        values = spark_filter.value
    else:
        return None
    tags = [v for v in values if isinstance(v, str) and v and "||" not in v and "'" not in v]
    if not tags or len(tags) != len(values):
        return None
    return frozenset(tags)


def pushed_selector(filters: Sequence[Filter], base: MessageSelector) -> MessageSelector:
    """``base`` narrowed by the tag filters among ``filters`` (ANDed, as Spark hands them over)."""
    allowed: frozenset[str] | None = base.tags() if base.expression_type != SQL92 else None
    found = False
    for spark_filter in filters:
        tags = _tag_set(spark_filter)
        if tags is not None:
            allowed = tags if allowed is None else allowed & tags
            found = True
    if not found or not allowed:  # nothing to push, or no tag can match: Spark's own filter answers
        return base
    ordered = sorted(allowed)
    if base.expression_type == SQL92:
        quoted = ", ".join(f"'{t}'" for t in ordered)
        return MessageSelector.by_sql(f"({base.expression}) AND (TAGS IN ({quoted}))")
    return MessageSelector.by_tag(" || ".join(ordered))
