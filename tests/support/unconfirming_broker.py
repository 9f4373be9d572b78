"""A real NameServer and broker, in-process on their own event loop, whose sends can be made
to answer FLUSH_DISK_TIMEOUT (10), SLAVE_NOT_AVAILABLE (11) or FLUSH_SLAVE_TIMEOUT (12).

The broker stores every message as usual (the real send processor runs); while ``answers``
holds codes, the next send answers the first of them instead of SUCCESS, the way a broker whose
flush or replica did not confirm in time answers. Everything travels over real sockets.

>>> # with UnconfirmingCluster.start(tmp_path) as cluster:
>>> #     cluster.answers.extend([ResponseCode.FLUSH_DISK_TIMEOUT]); producer.send(...)
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sparkmq.broker.controller import BrokerController
from sparkmq.namesrv import NameServer
from sparkmq.namesrv.config import NamesrvConfig
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.remoting import RemotingConnection
from support.broker_wire import small_config
from support.client_harness import create_topic, wait_for_route

T = TypeVar("T")
SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


@dataclass
class UnconfirmingCluster:
    """The running pair; ``answers`` are consumed one per send, ``always`` answers every send."""

    loop: asyncio.AbstractEventLoop
    namesrv: NameServer
    broker: BrokerController
    answers: deque[int]
    always: list[int]

    @property
    def ns(self) -> str:
        return self.namesrv.address

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def topic(self, name: str, queues: int = 2) -> str:
        create_topic([self.broker.config.address], name, queues)
        wait_for_route(self.ns, name, {self.broker.config.broker_name})
        return name

    def stored(self, topic: str, queue_id: int) -> int:
        """How many messages queue ``queue_id`` of ``topic`` holds."""
        assert self.broker.store is not None
        return self.run(_max_offset(self.broker, topic, queue_id))

    @classmethod
    @contextmanager
    def start(cls, store_dir: Path) -> Iterator[UnconfirmingCluster]:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="unconfirming-cluster", daemon=True)
        thread.start()
        answers: deque[int] = deque()
        always: list[int] = []

        async def up() -> tuple[NameServer, BrokerController]:
            namesrv = NameServer(NamesrvConfig("127.0.0.1", port=0))
            await namesrv.start()
            broker = BrokerController(small_config(store_dir, namesrv_addr=namesrv.address))
            await broker.start()
            for code in SEND_CODES:
                real = broker.server._processors[int(code)]  # the real send processor keeps storing

                async def unconfirming(
                    request: RemotingCommand, connection: RemotingConnection, real: Any = real
                ) -> RemotingCommand | None:
                    response = await real(request, connection)
                    forced = answers.popleft() if answers else (always[0] if always else None)
                    if response is None or forced is None or response.code != ResponseCode.SUCCESS:
                        return response
                    return request.make_response(
                        forced, remark=f"injected {ResponseCode(forced).name}", ext_fields=response.ext_fields
                    )

                broker.server.register(code, unconfirming)
            return namesrv, broker

        namesrv, broker = asyncio.run_coroutine_threadsafe(up(), loop).result(30)
        cluster = cls(loop, namesrv, broker, answers, always)
        try:
            yield cluster
        finally:
            cluster.run(broker.close())
            cluster.run(namesrv.close())
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()


async def _max_offset(broker: BrokerController, topic: str, queue_id: int) -> int:
    assert broker.store is not None
    return broker.store.max_offset_in_queue(topic, queue_id)
