"""A 5.x producer's Telemetry stream as a transaction check-back target.

The check-back (``broker/transactions/check.py``) asks a live producer of a half message's group
with a CHECK_TRANSACTION_STATE command on its connection. A 5.x producer has no remoting
connection: its Telemetry stream stands in for one, turning each question into the
RecoverOrphanedTransactionCommand the client answers with an EndTransaction.
"""

from __future__ import annotations

import asyncio
import itertools

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from sparkmq.broker.grpc import convert
from sparkmq.message.record import StoredMessage, decode_record
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.client_headers import CheckTransactionStateRequestHeader
from sparkmq.protocol.headers import EndTransactionRequestHeader

_IDS = itertools.count(1)
TX_GROUP_PREFIX = "GRPC_TX_"  # the producer group of a topic's gRPC transactions (PGROUP of its half messages)
RESOLUTIONS = {pb.COMMIT: 8, pb.ROLLBACK: 12}  # END_TRANSACTION's commitOrRollback


def tx_group(topic: str) -> str:
    return TX_GROUP_PREFIX + topic


def transaction_id(commit_log_offset: int, queue_offset: int, uniq_id: str) -> str:
    """What EndTransaction needs to find a half message: its CommitLog and half-queue offsets."""
    return f"{commit_log_offset} {queue_offset} {uniq_id}"


def parse_transaction_id(text: str) -> tuple[int, int, str] | None:
    parts = text.split(" ", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1]), parts[2]


def end_header(
    topic: str, ids: tuple[int, int, str], resolution: int, message_id: str, from_check: bool
) -> EndTransactionRequestHeader:
    """The END_TRANSACTION of an EndTransaction RPC; ``ids`` as :func:`parse_transaction_id` gives them."""
    commit_log_offset, queue_offset, txid = ids
    return EndTransactionRequestHeader(
        tx_group(topic), queue_offset, commit_log_offset, RESOLUTIONS.get(resolution, 0), message_id, from_check, txid
    )


class TelemetryChannel:
    """Duck-types what the check-back uses of a RemotingConnection (``id``, ``peer``, ``is_open``,
    ``next_opaque``, ``send``, ``close``) over one Telemetry stream's outbound queue."""

    def __init__(
        self, client_id: str, peer: tuple[str, int], outbound: asyncio.Queue[spb.TelemetryCommand | None], limit: int
    ) -> None:
        self.id = -next(_IDS)  # never a remoting connection's id
        self.client_id = client_id
        self.peer = peer
        self.outbound = outbound
        self.limit = limit  # commands queued for a client that does not read; a check-back beyond it is dropped
        self.is_open = True
        self._loop = asyncio.get_running_loop()

    def next_opaque(self) -> int:
        return 0

    def send(self, command: RemotingCommand) -> None:
        if command.code != RequestCode.CHECK_TRANSACTION_STATE or not self.is_open:
            return
        header = CheckTransactionStateRequestHeader.from_fields(command.ext_fields)
        txid = transaction_id(header.commit_log_offset, header.tran_state_table_offset, header.transaction_id or "")
        self.recover(decode_record(command.body), txid)

    def recover(self, half: StoredMessage, txid: str) -> None:
        """Ask the client about the transaction of ``half`` (a RecoverOrphanedTransactionCommand)."""
        if not self.is_open:
            return
        message = convert.to_protobuf(half, half.topic, "", 0, 1, pb.CRC32)
        recover = spb.RecoverOrphanedTransactionCommand(message=message, transaction_id=txid)
        self._loop.call_soon_threadsafe(self._queue, spb.TelemetryCommand(recover_orphaned_transaction_command=recover))

    def _queue(self, command: spb.TelemetryCommand) -> None:
        if self.outbound.qsize() < self.limit:  # else dropped: the checker asks again next interval
            self.outbound.put_nowait(command)

    def close(self) -> None:
        self.is_open = False
