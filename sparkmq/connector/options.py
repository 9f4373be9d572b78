"""Source options: Kafka-connector-shaped, parsed and validated once, each error naming its option.

PySpark hands options over lower-cased; every known option is matched case-insensitively.
An unknown option is an error (a typo must not silently change a query). The sink's options are
in :mod:`.sink_options`, built from the same parsers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkmq.client.security import ClientSecurity
from sparkmq.connector.columns import source_columns
from sparkmq.errors import OptionError

if TYPE_CHECKING:  # the selector is for reading: Spark's per-query source runner never asks for it
    from sparkmq.client.selector import MessageSelector

SPARK_INTERNAL_OPTIONS = frozenset({"path", "checkpointlocation"})
#: ACL 1.0 credentials and TLS, the same options for the source and the sink.
SECURITY_OPTIONS = frozenset({"accesskey", "secretkey", "tlsenable", "tlstrustcertpath"})


def parse_security(opts: Mapping[str, str]) -> ClientSecurity:
    """``accessKey`` + ``secretKey`` (both or neither), ``tlsEnable``, ``tlsTrustCertPath`` (lower-cased keys)."""
    access_key, secret_key = (opts.get("accesskey") or "").strip(), (opts.get("secretkey") or "").strip()
    if bool(access_key) != bool(secret_key):
        raise OptionError("accessKey" if not access_key else "secretKey", "accessKey and secretKey go together")
    tls = _bool("tlsEnable", opts.get("tlsenable"), False)
    return ClientSecurity.of(
        access_key or None,
        secret_key or None,
        tls=tls,
        trust_cert_path=(opts.get("tlstrustcertpath") or "").strip() or None,
    )


HISTORIES = ("broker", "table")  # where offsets below a queue's minimum on the broker come from
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}


def _positive_int(name: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise OptionError(name, f"{raw!r} is not a whole number") from exc
    if value <= 0:
        raise OptionError(name, f"must be positive, got {value}")
    return value


def _bool(name: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise OptionError(name, f"{raw!r} is not true or false")
    return raw.strip().lower() == "true"


def _duration_ms(name: str, raw: str | None, default: int) -> int:
    if raw is None:
        return default
    match = _DURATION.match(raw)
    if not match:
        raise OptionError(name, f"{raw!r} is not a duration like '30s', '5m' or '1500ms'")
    return int(match.group(1)) * _DURATION_MS[match.group(2)]


def _json_object(name: str, raw: str) -> dict[str, object]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(name, f"is not valid JSON: {exc.msg}") from exc
    if not isinstance(value, dict):
        raise OptionError(name, "must be a JSON object")
    return value


def parse_queue_offsets(name: str, raw: str) -> dict[str, dict[str, int]]:
    """``{"topic": {"broker:queueId" | "queueId": offset}}`` (offsets −2 = earliest, −1 = latest)."""
    result: dict[str, dict[str, int]] = {}
    for topic, queues in _json_object(name, raw).items():
        if not isinstance(queues, dict):
            raise OptionError(name, f"topic {topic!r} must map queues to offsets")
        parsed: dict[str, int] = {}
        for queue, offset in queues.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < -2:
                raise OptionError(name, f"offset of {topic}/{queue} must be an integer ≥ -2, got {offset!r}")
            parsed[str(queue)] = offset
        result[topic] = parsed
    return result


@dataclass(frozen=True)
class SourceOptions:
    """Everything ``spark.readStream/read.format("sparkmq")`` accepts."""

    namesrv_addr: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    consumer_group: str | None = None
    starting_offsets: str = "latest"
    starting_offsets_json: dict[str, dict[str, int]] | None = None
    starting_timestamp: int | None = None
    starting_offsets_by_timestamp: dict[str, dict[str, int]] | None = None
    ending_offsets: str = "latest"
    ending_offsets_json: dict[str, dict[str, int]] | None = None
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    sub_expression: str = "*"
    sql_filter: str | None = None
    fail_on_data_loss: bool = True
    max_records_per_partition: int | None = None
    max_partitions: int | None = None
    pull_batch_size: int = 4096
    include_properties: bool = False
    wide_schema: bool = False
    filter_pushdown: bool = False
    local_reads: bool = True
    history: str = "broker"
    table_root: str | None = None
    security: ClientSecurity = field(default_factory=ClientSecurity, repr=False)

    KNOWN = SECURITY_OPTIONS | frozenset(
        {
            "namesrvaddr",
            "topic",
            "topicpattern",
            "assign",
            "consumergroup",
            "startingoffsets",
            "startingtimestamp",
            "startingoffsetsbytimestamp",
            "endingoffsets",
            "endingtimestamp",
            "maxoffsetspertrigger",
            "maxbytespertrigger",
            "minoffsetspertrigger",
            "maxtriggerdelay",
            "subexpression",
            "sqlfilter",
            "failondataloss",
            "maxrecordsperpartition",
            "maxpartitions",
            "pullbatchsize",
            "includeproperties",
            "wideschema",
            "filterpushdown",
            "localreads",
            "history",
            "tableroot",
        }
    )

    @property
    def columns(self) -> tuple[str, ...]:
        """The source's columns: lean by default, ``properties`` with includeProperties, all with wideSchema."""
        return source_columns(self.wide_schema, self.include_properties)

    @property
    def selector(self) -> MessageSelector:
        """What the broker filters on: ``sqlFilter`` (SQL92 over properties) or ``subExpression`` (tags)."""
        from sparkmq.client.selector import MessageSelector

        return (
            MessageSelector.by_sql(self.sql_filter) if self.sql_filter else MessageSelector.by_tag(self.sub_expression)
        )

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool | None = None) -> SourceOptions:
        """Validate ``options``; ``streaming`` adds the checks of one query kind (None: common only)."""
        opts = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(opts) - cls.KNOWN - SPARK_INTERNAL_OPTIONS)
        if unknown:
            raise OptionError(unknown[0], f"is not a sparkmq source option (known: {', '.join(sorted(cls.KNOWN))})")
        namesrv = (opts.get("namesrvaddr") or "").strip()
        if not namesrv:
            raise OptionError("namesrvAddr", "is required (host:port[;host:port] of the NameServer)")
        chosen = [name for name in ("topic", "topicpattern", "assign") if opts.get(name)]
        if len(chosen) != 1:
            raise OptionError(
                "topic",
                "exactly one of 'topic', 'topicPattern' and 'assign' must be set"
                + (f" (got {', '.join(chosen)})" if chosen else ""),
            )
        topics: tuple[str, ...] = ()
        pattern = assign = None
        if "topic" in chosen:
            topics = tuple(t.strip() for t in opts["topic"].split(",") if t.strip())
        elif "topicpattern" in chosen:
            pattern = opts["topicpattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError("topicPattern", f"is not a regular expression: {exc}") from exc
        else:
            assign = {}
            for topic, ids in _json_object("assign", opts["assign"]).items():
                if not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids):
                    raise OptionError("assign", f"topic {topic!r} must map to a list of queue ids")
                assign[topic] = tuple(ids)
        starting = opts.get("startingoffsets", "latest" if streaming is not False else "earliest").strip()
        starting_json = None
        if starting.startswith("{"):
            starting_json, starting = parse_queue_offsets("startingOffsets", starting), "json"
        elif starting.lower() not in ("earliest", "latest", "group"):
            raise OptionError("startingOffsets", f"{starting!r} is not earliest, latest, group or a JSON object")
        ending = opts.get("endingoffsets", "latest").strip()
        ending_json = None
        if ending.startswith("{"):
            ending_json, ending = parse_queue_offsets("endingOffsets", ending), "json"
        elif ending.lower() != "latest":
            raise OptionError("endingOffsets", f"{ending!r} is not latest or a JSON object")
        if streaming and ("endingoffsets" in opts or "endingtimestamp" in opts):
            name = "endingOffsets" if "endingoffsets" in opts else "endingTimestamp"
            raise OptionError(name, "is for batch queries only (spark.read), not streams")
        parsed = cls(
            namesrv_addr=namesrv,
            topics=topics,
            topic_pattern=pattern,
            assign=assign,
            consumer_group=(opts.get("consumergroup") or "").strip() or None,
            starting_offsets=starting.lower(),
            starting_offsets_json=starting_json,
            starting_timestamp=_non_negative("startingTimestamp", opts.get("startingtimestamp")),
            starting_offsets_by_timestamp=parse_queue_offsets(
                "startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"]
            )
            if opts.get("startingoffsetsbytimestamp")
            else None,
            ending_offsets=ending.lower(),
            ending_offsets_json=ending_json,
            ending_timestamp=_non_negative("endingTimestamp", opts.get("endingtimestamp")),
            max_offsets_per_trigger=_positive_int("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger")),
            max_bytes_per_trigger=_positive_int("maxBytesPerTrigger", opts.get("maxbytespertrigger")),
            min_offsets_per_trigger=_positive_int("minOffsetsPerTrigger", opts.get("minoffsetspertrigger")),
            max_trigger_delay_ms=_duration_ms(
                "maxTriggerDelay", opts.get("maxtriggerdelay"), DEFAULT_MAX_TRIGGER_DELAY_MS
            ),
            sub_expression=(opts.get("subexpression") or "*").strip() or "*",
            sql_filter=(opts.get("sqlfilter") or "").strip() or None,
            fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss"), True),
            max_records_per_partition=_positive_int("maxRecordsPerPartition", opts.get("maxrecordsperpartition")),
            max_partitions=_positive_int("maxPartitions", opts.get("maxpartitions")),
            pull_batch_size=_positive_int("pullBatchSize", opts.get("pullbatchsize")) or 4096,
            include_properties=_bool("includeProperties", opts.get("includeproperties"), False),
            wide_schema=_bool("wideSchema", opts.get("wideschema"), False),
            filter_pushdown=_bool("filterPushdown", opts.get("filterpushdown"), False),
            local_reads=_bool("localReads", opts.get("localreads"), True),
            history=(opts.get("history") or "broker").strip().lower(),
            table_root=(opts.get("tableroot") or "").strip() or None,
            security=parse_security(opts),
        )
        _check_history(parsed)
        if parsed.sql_filter is not None and parsed.sub_expression != "*":
            raise OptionError(
                "sqlFilter", "cannot be combined with subExpression: put the tag test in the SQL (TAGS IN ('A'))"
            )
        if streaming and parsed.filter_pushdown:
            raise OptionError(
                "filterPushdown",
                "is for batch reads only (Spark pushes no filters into streams): use subExpression or sqlFilter",
            )
        if streaming and parsed.consumer_group is None:
            raise OptionError("consumerGroup", "is required for streaming queries: offsets are committed there")
        if streaming is False and parsed.starting_offsets == "latest" and "startingoffsets" in opts:
            raise OptionError("startingOffsets", "latest is not allowed for batch queries (nothing would be read)")
        if (
            parsed.min_offsets_per_trigger
            and parsed.max_offsets_per_trigger
            and parsed.min_offsets_per_trigger > parsed.max_offsets_per_trigger
        ):
            raise OptionError("minOffsetsPerTrigger", "must not exceed maxOffsetsPerTrigger")
        return parsed


def _check_history(parsed: SourceOptions) -> None:
    """``history=table`` reads offsets below the broker's minimum from ``<tableRoot>/<topic>``: every message,
    the lean columns and properties (what a topic's table holds)."""
    if parsed.history not in HISTORIES:
        raise OptionError("history", f"{parsed.history!r} is not {' or '.join(HISTORIES)}")
    if parsed.history != "table":
        if parsed.table_root is not None:
            raise OptionError("tableRoot", "is for history=table only")
        return
    if parsed.table_root is None:
        raise OptionError("tableRoot", "is required with history=table (the broker's tableTopicRoot)")
    if parsed.wide_schema:
        raise OptionError("wideSchema", "a topic's table holds the lean columns and properties, not the wide schema")
    if parsed.sql_filter is not None or parsed.sub_expression != "*" or parsed.filter_pushdown:
        raise OptionError("history", "table reads every message: filter the rows in Spark instead of on the broker")


def _non_negative(name: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise OptionError(name, f"{raw!r} is not milliseconds since the epoch") from exc
    if value < 0:
        raise OptionError(name, f"must not be negative, got {value}")
    return value
