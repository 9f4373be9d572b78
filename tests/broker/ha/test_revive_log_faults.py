"""A POP change whose revive log record the store refuses (controller mode): not answered as durable, kept nowhere.

An in-process SYNC_FLUSH broker in controller mode, master of its group through a NameServer process
with the controller embedded. The CommitLog is made unable to allocate its next segment (ENOSPC through
``sparkmq.store.disk``, the store's seam) once a POP is in flight; the ack and the invisible-time change
then get a clear error, the POP state (memory, journal, revive log) is as before, and the same requests
succeed once space returns.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.pop.service import PopService
from sparkmq.message.record import iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
)
from sparkmq.store import disk
from support.broker_wire import Wire, serve
from support.controller_group import FAST, GROUP, ControllerGroup
from support.disk_faults import NoSpaceForCommitLog

CONSUMER, TOPIC = "CID_REVIVE_FAULT", "ReviveFault"
SEGMENT = 1 << 20


def pop_state(pop: PopService) -> tuple[object, ...]:
    """What a POP change alters: the checkpoints in flight, the pop offsets, how far the revive log goes."""
    state = pop.state
    inflight = {ck: (r.offset, r.deadline_ms) for ck, r in state.inflight.items()}
    assert pop.log is not None
    return inflight, dict(state.pop_offsets), pop.log.end(), pop.journal.durable.inflight.keys() == inflight.keys()


def handle_of(answer: RemotingCommand, start: int) -> str:
    """The extraInfo a 5.x client builds from a POP answer (``ExtraInfoUtil.buildExtraInfo``)."""
    f = answer.ext_fields
    return f"{start} {f['popTime']} {f['invisibleTime']} {f['reviveQid']} 0 {GROUP} 0"


def test_a_refused_revive_log_record_keeps_the_pop_change_nowhere_and_the_retry_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(wire: Wire) -> None:
        pop = wire.broker.pop
        assert pop is not None and pop.log is not None
        deadline = time.monotonic() + 60
        while (await wire.send(TOPIC, b"m0", queue_nums=1)).code != ResponseCode.SUCCESS:  # once it is master
            assert time.monotonic() < deadline, "the broker never became master"
            await asyncio.sleep(0.1)
        for body in (b"m1", b"m2"):
            await wire.send_ok(TOPIC, body, queue_nums=1)
        born = int(time.time() * 1000)
        header = PopMessageRequestHeader(CONSUMER, TOPIC, 0, 8, 60_000, 0, born, 0, "TAG", "*").to_fields()
        popped = await wire.call(RequestCode.POP_MESSAGE, header)
        assert popped.code == ResponseCode.SUCCESS, popped.remark
        assert [bytes(m.body) for m in iter_records(popped.body)] == [b"m0", b"m1", b"m2"]
        info = handle_of(popped, 0)
        ack = {o: AckMessageRequestHeader(CONSUMER, TOPIC, 0, info, o).to_fields() for o in range(3)}
        change = ChangeInvisibleTimeRequestHeader(CONSUMER, TOPIC, 0, info, 1, 120_000).to_fields()
        before = pop_state(pop)
        assert len(before[0]) == 3 and before[3]

        monkeypatch.setattr(disk, "fallocate", NoSpaceForCommitLog())
        for size in (300_000, 30_000, 3_000, 300, 30, 1):  # fill the segment: even a tiny record needs the next
            while (refused := await wire.send("Filler", b"f" * size, queue_nums=1)).code == ResponseCode.SUCCESS:
                pass
            assert refused.code == ResponseCode.SYSTEM_ERROR, refused.remark
        for code, fields in ((RequestCode.ACK_MESSAGE, ack[0]), (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change)):
            answer = await wire.call(code, fields)
            assert answer.code == ResponseCode.SYSTEM_ERROR, (answer.code, answer.remark)
            remark = answer.remark or ""
            assert "revive log" in remark and "CREATE_MAPEDFILE_FAILED" in remark and "retry it" in remark, remark
            assert pop_state(pop) == before  # in memory, in the journal on disk, in the revive log

        monkeypatch.undo()  # space returns: the same requests succeed
        assert (await wire.call(RequestCode.ACK_MESSAGE, ack[0])).code == ResponseCode.SUCCESS
        changed = await wire.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change)
        assert changed.code == ResponseCode.SUCCESS, changed.remark
        changed_info = info.split(" ")
        changed_info[1:3] = changed.ext_fields["popTime"], changed.ext_fields["invisibleTime"]
        ack[1] = AckMessageRequestHeader(CONSUMER, TOPIC, 0, " ".join(changed_info), 1).to_fields()
        for offset in (1, 2):
            assert (await wire.call(RequestCode.ACK_MESSAGE, ack[offset])).code == ResponseCode.SUCCESS
        assert not pop.state.inflight and pop.log.end() > before[2]
        entries, _ = pop.log.read(before[2])
        assert [e["k"] for e in entries].count("ack") == 3  # the revive log holds each ack once

    with ControllerGroup(tmp_path, size=0) as group:
        assert group.namesrv is not None
        settings = {**FAST, "enableControllerMode": "true", "controllerAddr": group.namesrv.address}
        settings |= {"mapedFileSizeCommitLog": str(SEGMENT), "autoCreateTopicEnable": "true"}
        config = BrokerConfig.from_properties(
            settings, namesrv_addr=group.namesrv.address, listen_port=0, store_path_root_dir=tmp_path / "broker"
        )
        asyncio.run(serve(config, scenario))
