"""What one sink task reports to the driver (pickled back to it: a light module, no client)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql.datasource import WriterCommitMessage


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task sent: messages per queue and the queue offsets they got."""

    sent: int = 0
    queues: dict[str, tuple[int, int]] = field(default_factory=dict)  # "topic/broker/qid" -> (first, last) offset
