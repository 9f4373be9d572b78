"""Sink options: ``df.write/writeStream.format("sparkmq")``, parsed and validated once, each error naming its option.

Apart from the source's (:mod:`.options`): Spark's per-query source runner parses source options only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkmq.client.security import ClientSecurity
from sparkmq.connector.options import (
    SECURITY_OPTIONS,
    SPARK_INTERNAL_OPTIONS,
    _duration_ms,
    _positive_int,
    parse_security,
)
from sparkmq.errors import OptionError


@dataclass(frozen=True)
class SinkOptions:
    """Everything ``df.write/writeStream.format("sparkmq")`` accepts."""

    namesrv_addr: str
    topic: str | None = None
    producer_group: str = "sparkmq-spark-sink"
    batch_size: int = 256
    max_in_flight: int = 16
    delivery_guarantee: str = "at-least-once"
    send_retry_timeout_ms: int = 30_000  # how long a task waits for a broker to serve the topic again
    security: ClientSecurity = field(default_factory=ClientSecurity, repr=False)

    KNOWN = SECURITY_OPTIONS | frozenset(
        {"namesrvaddr", "topic", "producergroup", "batchsize", "maxinflight", "deliveryguarantee", "sendretrytimeout"}
    )

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(opts) - cls.KNOWN - SPARK_INTERNAL_OPTIONS)
        if unknown:
            raise OptionError(unknown[0], f"is not a sparkmq sink option (known: {', '.join(sorted(cls.KNOWN))})")
        namesrv = (opts.get("namesrvaddr") or "").strip()
        if not namesrv:
            raise OptionError("namesrvAddr", "is required (host:port[;host:port] of the NameServer)")
        guarantee = (opts.get("deliveryguarantee") or "at-least-once").strip().lower()
        if guarantee not in ("at-least-once", "exactly-once"):
            raise OptionError("deliveryGuarantee", f"{guarantee!r} is not at-least-once (the default) or exactly-once")
        return cls(
            namesrv,
            (opts.get("topic") or "").strip() or None,
            (opts.get("producergroup") or "sparkmq-spark-sink").strip(),
            _positive_int("batchSize", opts.get("batchsize")) or 256,
            _positive_int("maxInFlight", opts.get("maxinflight")) or 16,
            guarantee,
            _duration_ms("sendRetryTimeout", opts.get("sendretrytimeout"), 30_000),
            parse_security(opts),
        )
