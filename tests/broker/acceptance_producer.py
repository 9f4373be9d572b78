"""A producer process for the broker acceptance tests: sends until the broker goes away.

    python tests/broker/acceptance_producer.py BROKER_ADDR TOPIC QUEUES [CONCURRENCY]

Every message has a unique body ``body-<n>`` and goes to queue ``n % QUEUES`` with
SEND_MESSAGE_V2. Each acknowledged send (SUCCESS: with ``--flush sync`` the broker answers
only after the fsync) is printed and flushed at once as ``ACK <queue> <queueOffset> <n>``, so
whoever reads stdout knows every acknowledged message even if this process dies right after.
The first failed send prints ``FAIL <reason>``; the process exits 0 once its senders stopped.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time

from sparkmq.errors import SparkmqError
from sparkmq.message import encode_properties
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.headers import SendMessageRequestHeaderV2
from sparkmq.remoting import RemotingClient

SEND_TIMEOUT_S = 5.0
PRODUCER_GROUP = "acceptance-producer"


def body_of(number: int) -> bytes:
    """The unique body of message ``number`` (padded so records are not trivially small)."""
    return f"body-{number}".encode() + b"." * 200


async def sender(
    client: RemotingClient, address: str, topic: str, queues: int, numbers: itertools.count[int], stop: asyncio.Event
) -> None:
    properties = encode_properties({"WAIT": "true", "KEYS": "acceptance"}).decode()
    while not stop.is_set():
        number = next(numbers)
        queue_id = number % queues
        header = SendMessageRequestHeaderV2(
            PRODUCER_GROUP, topic, "TBW102", queues, queue_id, 0, int(time.time() * 1000), 0, properties
        )
        try:
            response = await client.invoke(
                address, RequestCode.SEND_MESSAGE_V2, header.to_fields(), body_of(number), timeout=SEND_TIMEOUT_S
            )
        except SparkmqError as exc:
            if not stop.is_set():
                print(f"FAIL {exc.remark}", flush=True)
            stop.set()
            return
        if response.code != ResponseCode.SUCCESS:
            print(f"FAIL code {response.code} {response.remark}", flush=True)
            stop.set()
            return
        fields = response.ext_fields
        print(f"ACK {fields['queueId']} {fields['queueOffset']} {number}", flush=True)


async def main(address: str, topic: str, queues: int, concurrency: int) -> None:
    client = RemotingClient()
    stop = asyncio.Event()
    numbers = itertools.count()
    try:
        await asyncio.gather(*(sender(client, address, topic, queues, numbers, stop) for _ in range(concurrency)))
    finally:
        await client.close()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    asyncio.run(main(arguments[0], arguments[1], int(arguments[2]), int(arguments[3]) if len(arguments) > 3 else 4))
