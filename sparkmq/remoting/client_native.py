"""The client's optional C accelerator (``client_lane.c``): ``frame``, ``send_frame``, ``deliver``, ``Sender``, or None.

None when the extension was not built (no compiler at install time) or ``SPARKMQ_NATIVE=0`` switched
the native paths off (:mod:`sparkmq.native`); the Python they replace is the reference
(``SendTemplate.frame``; ``SendIds.at`` + ``Message.properties_text`` + ``frame`` for ``send_frame``;
``ClientConnection.data_received``'s msgspec walk; ``cls(*values)`` for ``slotted``), and
tests/remoting/test_client_lane_parity.py compares both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkmq.native import built, extension

frame: Callable[[bytes, bytes, int, int, int, int, str, bytes], bytes | None] | None = None
send_frame: Callable[[bytes, bytes, int, int, int, int, str, str, int, bytes], tuple[str, bytes] | None] | None = None
deliver: Callable[[bytes, int, dict[int, Any]], int] | None = None
slotted: Callable[..., Any] | None = None
set_never_done: Callable[[type], None] | None = None
#: ``Sender(producer, lanes, routes, faults, counter, ids, plain_below)``: a producer's whole lean send in C
#: (the reference: ``AsyncProducer._lean_send`` + ``ClientConnection.send_lean`` + ``CallbackSend``), once
#: ``configure`` has been given the Python constants and hooks (``sparkmq.client.lean_send`` does it)
Sender: Any = None
configure: Callable[..., None] | None = None
#: Whether the extension exists, whatever the switch says.
BUILT = built("sparkmq.remoting._clientlane")
_clientlane = extension("sparkmq.remoting._clientlane")
if _clientlane is not None:
    frame, send_frame, deliver = _clientlane.frame, _clientlane.send_frame, _clientlane.deliver
    slotted, set_never_done = _clientlane.slotted, _clientlane.set_never_done
    Sender, configure = _clientlane.Sender, _clientlane.configure

__all__ = ["BUILT", "Sender", "configure", "deliver", "frame", "send_frame", "set_never_done", "slotted"]
