"""The transactional-message state, kept in the store (RocketMQ's ``TransactionalMessageBridge``).

* A half message lives in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real topic and queue
  in the ``REAL_TOPIC`` / ``REAL_QID`` properties.
* An ended transaction gets an op record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0: tags
  ``d``, body = the half message's queue offset (as Java writes it), and ``KEYS`` = the
  transaction id (the half message's ``UNIQ_KEY``). The id is what makes an END idempotent:
  the check-back re-appends copies of a half message, and an END for any copy ends them all.
* A *batch* half message (``SPARKMQ_TXN_BATCH=true``, sparkmq's extension) carries a SEND_BATCH
  body: one transaction for many messages. Its COMMIT appends them all in one store write, the
  last one with the transaction id as its ``UNIQ_KEY`` (so the check-back's index lookup finds a
  commit only once the whole batch is stored).
* The check-back progress is the ``CID_RMQ_SYS_TRANS`` offset of the half queue in the
  consumer-offset table.

:class:`TransactionState` rebuilds the set of ended transaction ids from the op queue at start,
so a restarted broker neither commits twice nor asks about a transaction already decided.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Iterator

from sparkmq.errors import MessageError
from sparkmq.message import layout as L
from sparkmq.message.batch import MAX_INFLATED_BATCH_BYTES, BatchItems, decode_batch_items
from sparkmq.message.msgid import UniqueIdGenerator
from sparkmq.message.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from sparkmq.message.properties import (
    DELAY_TIME_LEVEL,
    KEYS,
    PRODUCER_GROUP,
    REAL_QUEUE_ID,
    REAL_TOPIC,
    TAGS,
    TRANSACTION_BATCH,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_PREPARED,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
    decode_properties,
    encode_properties,
    find_property,
)
from sparkmq.message.record import MessageBatch, StoredMessage, encode_records_plain, iter_records
from sparkmq.store import MessageStore

logger = logging.getLogger(__name__)
HALF_QUEUE_ID = 0  # RocketMQ uses one half queue (and one op queue with the same id)
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"  # TransactionalMessageUtil.buildConsumerGroup()
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVETAG
READ_BATCH = 256  # records per store read while scanning the half or op queue
_UNIQ_IDS = UniqueIdGenerator()


def is_prepared(batch: MessageBatch) -> bool:
    """A single message that opens a transaction: sysFlag PREPARED, or ``TRAN_MSG=true`` as Java checks."""
    if len(batch) != 1:
        return False
    if L.transaction_type(batch.sys_flag) == L.TRANSACTION_PREPARED_TYPE:
        return True
    return (find_property(batch.properties[0], TRANSACTION_PREPARED.encode()) or b"").lower() == b"true"


def half_message(batch: MessageBatch, producer_group: str) -> MessageBatch:
    """``parseHalfMessageInner``: the message as stored in the half queue.

    The transaction bits go back to NOT_TYPE so the half queue's ConsumeQueue indexes it;
    ``PGROUP`` defaults to the sending group and ``UNIQ_KEY`` (the transaction id) is made up
    when a client sent none. A delay level is dropped, as Java's producer clears it. A batch half
    message whose body is no SEND_BATCH body raises MessageError (the send answers MESSAGE_ILLEGAL).
    """
    props = decode_properties(batch.properties[0])
    if is_batch_half(props):
        carried_items(bytes(batch.bodies[0]), batch.sys_flag)  # refused now, not at its COMMIT
    props[REAL_TOPIC] = batch.topic
    props[REAL_QUEUE_ID] = str(batch.queue_id)
    props[TRANSACTION_PREPARED] = "true"
    props.setdefault(PRODUCER_GROUP, producer_group)
    props.setdefault(UNIQ_KEY, _UNIQ_IDS.next_id())
    props.pop(DELAY_TIME_LEVEL, None)
    sys_flag = batch.sys_flag & ~L.TRANSACTION_TYPE_MASK
    return MessageBatch(
        TRANS_HALF_TOPIC,
        HALF_QUEUE_ID,
        batch.bodies,
        [encode_properties(props)],
        batch.flags,
        sys_flag,
        batch.born_timestamp,
        batch.born_host,
        batch.reconsume_times,
    )


def transaction_id(message: StoredMessage) -> str:
    """The id an END or a check names the transaction by: the half message's ``UNIQ_KEY``."""
    return message.properties.get(UNIQ_KEY) or f"@{message.physical_offset}"


def is_batch_half(properties: dict[str, str]) -> bool:
    """A half message carrying a SEND_BATCH body (sparkmq's ``SPARKMQ_TXN_BATCH`` extension)."""
    return properties.get(TRANSACTION_BATCH) == "true"


def carried_items(body: bytes, sys_flag: int) -> BatchItems:
    """The messages a batch half message carries; MessageError when its body is no SEND_BATCH body."""
    if sys_flag & L.COMPRESSED_FLAG:
        inflater = zlib.decompressobj()
        try:
            body = inflater.decompress(body, MAX_INFLATED_BATCH_BYTES)
        except zlib.error as exc:
            raise MessageError(f"batch half message: its compressed body does not inflate: {exc}") from exc
        if inflater.unconsumed_tail:
            raise MessageError(f"batch half message: its body inflates past {MAX_INFLATED_BATCH_BYTES} bytes")
    try:
        items = decode_batch_items(body)
    except MessageError as exc:
        raise MessageError(f"batch half message: its body is no SEND_BATCH body: {exc.remark}") from exc
    if not len(items):
        raise MessageError("batch half message: its body carries no message")
    return items


def committed_message(half: StoredMessage) -> MessageBatch:
    """``endMessageTransaction``: the half message bound for its real topic and queue, type COMMIT
    (a batch half message: every message it carries)."""
    props = half.properties
    topic, queue_id = props.pop(REAL_TOPIC, ""), props.pop(REAL_QUEUE_ID, "")
    props.pop(TRANSACTION_PREPARED, None)
    if props.get(TRANSACTION_BATCH) == "true":
        return _committed_batch(half, topic, int(queue_id))
    props[WAIT_STORE_MSG_OK] = "false"
    sys_flag = (half.sys_flag & ~L.TRANSACTION_TYPE_MASK) | L.TRANSACTION_COMMIT_TYPE
    return MessageBatch(
        topic,
        int(queue_id),
        [bytes(half.body)],
        [encode_properties(props)],
        [half.flag],
        sys_flag,
        half.born_timestamp,
        half.born_host,
        half.reconsume_times,
        prepared_transaction_offset=half.physical_offset,
    )


def _committed_batch(half: StoredMessage, topic: str, queue_id: int) -> MessageBatch:
    items = carried_items(bytes(half.body), half.sys_flag)
    properties = list(items.properties)
    last = decode_properties(properties[-1])
    last[UNIQ_KEY] = transaction_id(half)  # stored last: a commit found by this id is a whole commit
    properties[-1] = encode_properties(last)
    sys_flag = (half.sys_flag & ~(L.TRANSACTION_TYPE_MASK | L.COMPRESSED_FLAG)) | L.TRANSACTION_COMMIT_TYPE
    return MessageBatch(
        topic,
        queue_id,
        items.bodies,
        properties,
        items.flags,
        sys_flag,
        half.born_timestamp,
        half.born_host,
        half.reconsume_times,
        prepared_transaction_offset=half.physical_offset,
    )


def commit_stored(store: MessageStore, half: StoredMessage) -> bool:
    """Whether ``half``'s commit is in the store already, found by its transaction id in the index: a crash,
    or a failover, between an END's commit and its op record leaves the commit stored but the transaction
    open (a commit is stored before its op, and a replica may hold the one without the other)."""
    real_topic = half.properties.get(REAL_TOPIC, "")
    return bool(real_topic) and any(
        L.transaction_type(m.sys_flag) == L.TRANSACTION_COMMIT_TYPE
        for m in store.query_messages(real_topic, transaction_id(half), 32)
    )


def op_message(half: StoredMessage) -> MessageBatch:
    """The op record that marks ``half``'s transaction as ended (``putOpMessage`` with REMOVETAG)."""
    props = {TAGS: REMOVE_TAG, KEYS: transaction_id(half), WAIT_STORE_MSG_OK: "false"}
    return MessageBatch(
        TRANS_OP_HALF_TOPIC,
        half.queue_id,
        [str(half.queue_offset).encode()],
        [encode_properties(props)],
        [0],
        0,
        half.born_timestamp,
        half.store_host,
    )


def half_copy(half: StoredMessage, check_times: int) -> MessageBatch:
    """``renewHalfMessageInner``: the half message re-appended to the half queue for the next round."""
    props = half.properties
    props[TRANSACTION_CHECK_TIMES] = str(check_times)
    return MessageBatch(
        TRANS_HALF_TOPIC,
        HALF_QUEUE_ID,
        [bytes(half.body)],
        [encode_properties(props)],
        [half.flag],
        half.sys_flag,
        half.born_timestamp,
        half.born_host,
        half.reconsume_times,
    )


def discarded_message(half: StoredMessage) -> MessageBatch:
    """A half message past ``transactionCheckMax``, parked in TRANS_CHECK_MAX_TIME_TOPIC."""
    return MessageBatch(
        TRANS_CHECK_MAX_TIME_TOPIC,
        0,
        [bytes(half.body)],
        [half.properties_raw],
        [half.flag],
        half.sys_flag,
        half.born_timestamp,
        half.born_host,
        half.reconsume_times,
    )


def check_body(half: StoredMessage) -> bytes:
    """The CHECK_TRANSACTION_STATE body: the half record with its real topic and queue restored
    (``MessageDecoder.encode(msg, false)``), offsets those of ``half``."""
    props = half.properties
    batch = MessageBatch(
        props.get(REAL_TOPIC, half.topic),
        int(props.get(REAL_QUEUE_ID, "0") or 0),
        [bytes(half.body)],
        [half.properties_raw],
        [half.flag],
        half.sys_flag,
        half.born_timestamp,
        half.born_host,
        half.reconsume_times,
        half.prepared_transaction_offset,
    )
    return encode_records_plain(
        batch, 0, 1, half.queue_offset, half.physical_offset, half.store_timestamp, half.store_host
    )


def read_queue_records(store: MessageStore, topic: str, offset: int) -> Iterator[StoredMessage]:
    """Records of ``topic`` queue 0 from ``offset`` to the end, a store read at a time."""
    while True:
        result = store.get_messages(SYSTEM_GROUP, topic, HALF_QUEUE_ID, offset, READ_BATCH)
        if result.message_count == 0:
            return
        yield from iter_records(result.body())
        offset = result.next_begin_offset


class TransactionState:
    """Which transactions have ended (by id); shared by END processing (event loop) and the
    check-back scan (a worker thread), hence the lock."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._ended: set[str] = set()
        self._lock = threading.Lock()

    def load(self) -> int:
        """Rebuild the ended set from the op queue (blocking: run it in a thread); return its size."""
        start = self.store.min_offset_in_queue(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        ended = {op.properties.get(KEYS, "") for op in read_queue_records(self.store, TRANS_OP_HALF_TOPIC, start)}
        ended.discard("")
        with self._lock:
            self._ended |= ended
        return len(ended)

    def claim(self, txid: str) -> bool:
        """Mark ``txid`` ended; False when it already was (a second END, or a check answered twice)."""
        with self._lock:
            if txid in self._ended:
                return False
            self._ended.add(txid)
            return True

    def release(self, txid: str) -> None:
        """Undo a ``claim`` whose commit could not be stored."""
        with self._lock:
            self._ended.discard(txid)

    def is_ended(self, txid: str) -> bool:
        with self._lock:
            return txid in self._ended
