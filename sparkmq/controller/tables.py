"""Where a controller's tables live: one node's controller.json, or a Raft log among several nodes.

Both hold the tables (``ReplicasInfoManager.to_json``) at a *revision* and take a new version
only through :meth:`commit`, a compare-and-set on the revision: a write computed on an older
version is refused, so a node that lost leadership while it worked cannot overwrite its
successor's decisions. With several nodes the log is pysyncobj's Raft (``controllerDLegerPeers``):
only its leader writes, a command is applied on every node once a majority holds it, and the
journal and snapshot kept in the store dir let a restarted node catch up.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, Protocol

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError

from .config import ControllerConfig

logger = logging.getLogger(__name__)
COMMIT_TIMEOUT_S = 3.0
JOURNAL_FILE = "raft.journal"
DUMP_FILE = "raft.dump"


class Tables(Protocol):
    """The tables as last committed, and how a leader writes them."""

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        """``(revision, tables)`` as last committed (or applied, on a follower)."""
        ...

    def is_leader(self) -> bool: ...

    def leader(self) -> tuple[str, str]:
        """``(node id, controller address)`` of the leader as this node knows it; empty when unknown."""
        ...

    def peers(self) -> list[tuple[str, str]]:
        """``(node id, controller address)`` of every node (the address empty while unknown)."""
        ...

    async def start(self, address: str) -> None: ...

    async def announce(self) -> None:
        """Make this node's controller address known to the others."""
        ...

    async def commit(self, revision: int, state: dict[str, Any]) -> bool:
        """Make ``state`` the tables if they are still at ``revision``; False: refused or not committed."""
        ...

    async def close(self) -> None: ...


class FileTables:
    """One node: the tables in ``controller.json``, written before an answer leaves."""

    def __init__(self, config: ControllerConfig) -> None:
        self._file: ConfigFile[dict[str, Any]] = ConfigFile(
            config.store_path / "controller.json", json.loads, json.dumps, ConfigError
        )
        self._id = config.self_id
        self._address = ""
        self._current: tuple[int, dict[str, Any]] = (0, {})

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        return self._current

    def is_leader(self) -> bool:
        return True

    def leader(self) -> tuple[str, str]:
        return self._id, self._address

    def peers(self) -> list[tuple[str, str]]:
        return [(self._id, self._address)]

    async def start(self, address: str) -> None:
        self._address = address
        loaded = await asyncio.to_thread(self._file.load)
        self._current = (0, loaded or {})

    async def announce(self) -> None:
        pass

    async def commit(self, revision: int, state: dict[str, Any]) -> bool:
        if revision != self._current[0]:
            return False
        await asyncio.to_thread(self._file.persist, state)
        self._current = (revision + 1, state)
        return True

    async def close(self) -> None:
        pass


class _Replicated(SyncObjConsumer):  # type: ignore[misc]
    """The replicated state machine; its methods run on pysyncobj's thread, on every node in log order."""

    def __init__(self) -> None:
        super().__init__()
        self.current = (0, "{}")  # (revision, the tables as JSON), replaced as one
        self.addresses: dict[str, str] = {}  # node id -> controller address

    @replicated  # type: ignore[untyped-decorator]
    def put(self, revision: int, state_text: str) -> bool:
        if revision != self.current[0]:
            return False
        self.current = (revision + 1, state_text)
        return True

    @replicated  # type: ignore[untyped-decorator]
    def announce(self, node_id: str, address: str) -> None:
        self.addresses = self.addresses | {node_id: address}


class RaftTables:
    """Several nodes: the tables replicated by pysyncobj's Raft over the ``controllerDLegerPeers`` ports."""

    def __init__(self, config: ControllerConfig) -> None:
        peers = dict(config.peers)
        self._id = config.self_id
        self._ids = {address: node_id for node_id, address in config.peers}
        self._order = [node_id for node_id, _ in config.peers]
        self._self_raft = peers[config.self_id]
        self._others = [address for node_id, address in config.peers if node_id != config.self_id]
        self._store = Path(config.store_path)
        self._machine = _Replicated()
        self._raft: SyncObj | None = None
        self._parsed: tuple[int, dict[str, Any]] = (0, {})
        self._address = ""

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        revision, text = self._machine.current
        if self._parsed[0] != revision:
            self._parsed = (revision, json.loads(text))
        return self._parsed

    def is_leader(self) -> bool:
        return self._raft is not None and bool(self._raft._isLeader())

    def leader(self) -> tuple[str, str]:
        node = None if self._raft is None else self._raft._getLeader()
        if node is None:
            return "", ""
        node_id = self._ids.get(str(node.address), "")
        return node_id, self._machine.addresses.get(node_id, "")

    def peers(self) -> list[tuple[str, str]]:
        return [(node_id, self._machine.addresses.get(node_id, "")) for node_id in self._order]

    async def start(self, address: str) -> None:
        self._store.mkdir(parents=True, exist_ok=True)
        conf = SyncObjConf(
            journalFile=str(self._store / JOURNAL_FILE),
            fullDumpFile=str(self._store / DUMP_FILE),
            commandsWaitLeader=False,
            connectionRetryTime=0.5,
            dynamicMembershipChange=False,
        )
        self._raft = await asyncio.to_thread(SyncObj, self._self_raft, self._others, conf, [self._machine])
        self._address = address
        logger.info("controller %s: Raft on %s with %s", self._id, self._self_raft, ", ".join(self._others))

    async def announce(self) -> None:
        """Put this node's controller address into the log (again, until it is there)."""
        if self._raft is not None and self._machine.addresses.get(self._id) != self._address:
            await self._submit(self._machine.announce, self._id, self._address)

    async def commit(self, revision: int, state: dict[str, Any]) -> bool:
        if not self.is_leader():
            return False
        return bool(await self._submit(self._machine.put, revision, json.dumps(state)))

    async def _submit(self, method: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any) -> None:
            if not done.done():
                done.set_result(value)

        def callback(result: Any, error: int) -> None:
            loop.call_soon_threadsafe(settle, result if error == FAIL_REASON.SUCCESS else None)

        method(*args, callback=callback)
        try:
            return await asyncio.wait_for(done, COMMIT_TIMEOUT_S)
        except TimeoutError:
            return None

    async def close(self) -> None:
        if self._raft is not None:
            raft, self._raft = self._raft, None
            await asyncio.to_thread(raft.destroy_synchronous)


def open_tables(config: ControllerConfig) -> FileTables | RaftTables:
    return RaftTables(config) if config.replicated else FileTables(config)
