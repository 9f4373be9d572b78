"""END_TRANSACTION (37): commit or roll back a half message (RocketMQ's ``EndTransactionProcessor``).

Clients send it oneway, so a refusal is also logged: nobody else would see it. With SYNC flush (or
SYNC_MASTER) a COMMIT is answered once the committed message is durable, as RocketMQ's
``sendFinalMessage`` does; a flush that fails or times out is answered with the send's code for it
(FLUSH_DISK_TIMEOUT, ...) and a remark, the decision staying stored. A second END for
a transaction already ended (by the producer, or by its answer to a check-back) changes
nothing and answers SUCCESS; an END naming something that is not that producer group's half
message is refused with SYSTEM_ERROR and a remark saying what did not match.
"""

from __future__ import annotations

import logging

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.put_codes import PUT_STATUS_TO_RESPONSE
from sparkmq.broker.transactions.state import (
    TransactionState,
    commit_stored,
    committed_message,
    op_message,
    transaction_id,
)
from sparkmq.errors import MessageError
from sparkmq.message import layout as L
from sparkmq.message.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from sparkmq.message.properties import PRODUCER_GROUP
from sparkmq.message.record import StoredMessage
from sparkmq.protocol import RemotingCommand, ResponseCode
from sparkmq.protocol.headers import EndTransactionRequestHeader
from sparkmq.remoting import RemotingConnection

logger = logging.getLogger(__name__)
_KIND = {
    L.TRANSACTION_COMMIT_TYPE: "COMMIT",
    L.TRANSACTION_ROLLBACK_TYPE: "ROLLBACK",
    L.TRANSACTION_NOT_TYPE: "UNKNOWN",
}


def half_mismatch(half: StoredMessage | None, header: EndTransactionRequestHeader) -> str | None:
    """``checkPrepareMessage``: why ``half`` is not the half message ``header`` names, or None."""
    where = f"commitLogOffset {header.commit_log_offset}"
    if half is None or half.topic != TRANS_HALF_TOPIC or half.physical_offset != header.commit_log_offset:
        return f"Find prepared transaction message failed: no half message at {where}"
    group = half.properties.get(PRODUCER_GROUP)
    if group != header.producer_group:
        return (
            f"The producer group wrong: the half message at {where} belongs to {group!r}, not {header.producer_group!r}"
        )
    if half.queue_offset != header.tran_state_table_offset:
        return (
            f"The transaction state table offset wrong: the half message at {where} has queue offset "
            f"{half.queue_offset}, not {header.tran_state_table_offset}"
        )
    return None


class EndTransactionProcessor:
    """Serves END_TRANSACTION for one broker; ``state`` knows which transactions have ended."""

    def __init__(self, context: BrokerContext, state: TransactionState) -> None:
        self.ctx = context
        self.state = state

    async def __call__(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        header = EndTransactionRequestHeader.from_fields(request.ext_fields)
        kind = _KIND.get(header.commit_or_rollback)
        origin = "check-back answer" if header.from_transaction_check else "END"
        peer = f"{connection.peer[0]}:{connection.peer[1]}"
        if kind is None:
            return self._refuse(request, peer, f"commitOrRollback {header.commit_or_rollback} is none of 0, 8, 12")
        if kind == "UNKNOWN":
            logger.info(
                "%s from %s for %s (group %s): state unknown, the check-back will ask again",
                origin,
                peer,
                header.msg_id,
                header.producer_group,
            )
            return request.make_response(ResponseCode.SUCCESS, remark="transaction state unknown: nothing done")
        half = self.ctx.store.look_message_by_offset(header.commit_log_offset)
        mismatch = half_mismatch(half, header)
        if mismatch is not None:
            return self._refuse(request, peer, f"{kind} {header.msg_id}: {mismatch}")
        assert half is not None
        txid = transaction_id(half)
        try:
            to_store = committed_message(half) if kind == "COMMIT" else None
        except MessageError as exc:  # a batch half message's body, checked when it was sent: only a bug lands here
            return self._refuse(request, peer, f"COMMIT {txid}: {exc.remark}")
        # Claimed before anything is stored (no await in between): a concurrent second END sees it.
        if not self.state.claim(txid):
            logger.info("%s %s from %s for transaction %s: already ended, nothing done", origin, kind, peer, txid)
            return request.make_response(ResponseCode.SUCCESS, remark=f"transaction {txid} already ended: nothing done")
        self.ctx.topics.create_system_topic(TRANS_OP_HALF_TOPIC, 1)
        durable = None
        if to_store is not None and commit_stored(self.ctx.store, half):
            # an END again after a crash or failover that kept the commit but not its op: only the op is missing
            logger.warning("COMMIT %s from %s: the commit is stored already, without its op record", txid, peer)
            to_store = None
        if to_store is not None:
            (committed,), durable = self.ctx.put_group([to_store], [True])
            if not committed.ok:
                self.state.release(txid)
                return self._refuse(
                    request,
                    peer,
                    f"COMMIT {txid}: storing the message failed: {committed.status.value} {committed.remark}",
                )
        # The op is bookkeeping (a lost one makes the check-back find the commit and write it again): no wait.
        (op,), _nobody_waits = self.ctx.put_group([op_message(half)], [False])
        if not op.ok:  # the decision is stored but not its op: the check-back finds the commit and writes the op
            logger.error(
                "%s %s: the op record in %s could not be stored: %s %s",
                kind,
                txid,
                TRANS_OP_HALF_TOPIC,
                op.status,
                op.remark,
            )
        logger.info(
            "%s %s from %s: transaction %s of group %s (half queue offset %d)",
            origin,
            kind,
            peer,
            txid,
            header.producer_group,
            half.queue_offset,
        )
        if durable is not None:  # SYNC flush / SYNC_MASTER: answer once the commit is durable, as a send is
            (outcome,) = await durable
            if not outcome.ok:
                remark = f"COMMIT {txid} is stored but not durable yet: {outcome.status.value} {outcome.remark}"
                logger.warning("END_TRANSACTION from %s: %s", peer, remark)
                return request.make_response(PUT_STATUS_TO_RESPONSE[outcome.status], remark=remark)
        return request.make_response(ResponseCode.SUCCESS)

    def _refuse(self, request: RemotingCommand, peer: str, remark: str) -> RemotingCommand:
        logger.warning("END_TRANSACTION from %s refused: %s", peer, remark)
        return request.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)
