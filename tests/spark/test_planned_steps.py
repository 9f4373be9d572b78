"""``planned_reads._step``: what one pull's answer means for a planned range (no broker needed: a pure function)."""

from __future__ import annotations

import pytest

from sparkmq.client.message import MessageQueue
from sparkmq.client.pull_wire import PullResult
from sparkmq.connector.planned_reads import _step
from sparkmq.errors import DataLossError
from sparkmq.protocol.codes import ResponseCode

QUEUE = MessageQueue("T", "broker-a", 0)


def test_a_retry_that_moves_forward_is_pulled_again_from_there() -> None:
    result = PullResult(ResponseCode.PULL_RETRY_IMMEDIATELY, b"", 40, 0, 100)
    assert _step(QUEUE, 10, 100, result, b"", True) == (None, 40)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_retry_at_the_same_offset_past_the_queue_end_never_spins(fail_on_data_loss: bool) -> None:
    """A slave without slaveReadEnable answers a pull past its end PULL_RETRY_IMMEDIATELY at the same offset
    (RocketMQ 4.x): the records it lacks never arrive once its master is gone."""
    result = PullResult(ResponseCode.PULL_RETRY_IMMEDIATELY, b"", 50, 0, 50)
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match="ends at 50, before the planned end 80"):
            _step(QUEUE, 50, 80, result, b"", True)
    else:
        assert _step(QUEUE, 50, 80, result, b"", False) == (None, None)
