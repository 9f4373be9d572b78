"""A PULL_MESSAGE's request fields and its decoded answer: what every reader of queues shares.

Kept apart from the pull consumer so that a reader with a socket of its own (the Spark source's
read tasks, ``connector/planned_reads.py``) imports neither the client instance nor asyncio: fewer
modules in each of Spark's Python workers, and fewer objects for its ``gc.collect()`` after every task.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkmq.client.responses import check_response
from sparkmq.client.selector import MessageSelector
from sparkmq.protocol import PullSysFlag, RemotingCommand, ResponseCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.client_headers import PullMessageRequestHeader, PullMessageResponseHeader

PULL_TIMEOUT_MARGIN_S = 5.0  # a pull's answer may take this much longer than its own suspend time


@dataclass(frozen=True, slots=True)
class PullResult:
    """One pull of one queue: a body of whole stored records and the offsets around it."""

    status: ResponseCode
    body: bytes
    next_begin_offset: int
    min_offset: int
    max_offset: int

    @property
    def found(self) -> bool:
        return self.status == ResponseCode.SUCCESS


def pull_request_fields(
    group: str,
    queue: MessageQueue,
    offset: int,
    max_messages: int,
    suspend_s: float = 0.0,
    expression: str | MessageSelector = "*",
) -> dict[str, str]:
    """The extFields of ``group``'s PULL_MESSAGE of ``queue`` at ``offset`` (needs no started client)."""
    flags = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_s > 0 else 0)
    selector = MessageSelector.of(expression)
    return PullMessageRequestHeader(
        group,
        queue.topic,
        queue.queue_id,
        offset,
        max_messages,
        int(flags),
        0,
        int(suspend_s * 1000),
        0,
        selector.expression,
        selector.expression_type,
    ).to_fields()


def decode_pull(queue: MessageQueue, offset: int, response: RemotingCommand) -> tuple[PullResult, int]:
    """A PULL_MESSAGE response as a PullResult and the broker id it suggests for the queue's next pull;
    an error code other than the pull's own raises."""
    if response.code not in (
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    ):
        check_response(response, f"pull {queue} at {offset}")
    fields = PullMessageResponseHeader.from_fields(response.ext_fields)
    result = PullResult(
        ResponseCode(response.code), response.body, fields.next_begin_offset, fields.min_offset, fields.max_offset
    )
    return result, fields.suggest_which_broker_id
