"""The native pull lane: plain PULL_MESSAGE requests served from a read's bytes (docs/native.md).

``_sendlane.scan_pulls`` splits the leading PULL_MESSAGE frames of a read and parses their JSON
headers in C (the shape real clients send: the header's string fields, digits for numbers, no
body) into ``PullMessageRequestHeader``'s fields; ``PullProcessor.serve_frame`` runs the
processor's own checks (cached per group, topic and subscription), commit and read, and a read
that finds records comes back from C as the whole SUCCESS frame (``_queueread.gather_frame``: the
header from a template ``RemotingCommand`` renders, the records copied once from the CommitLog).
The lane stops before the first pull that would be answered any other way (refused, nothing
found, parked for long polling, a SQL92 filter, bad text), which the usual path then serves in
arrival order.
"""

from __future__ import annotations

import time
from types import ModuleType

from sparkmq.broker.processors.pull import PullParts, PullProcessor
from sparkmq.broker.processors.send_lane import cut_around
from sparkmq.protocol import MAX_FRAME_BYTES, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import PullMessageResponseHeader
from sparkmq.remoting import RemotingConnection
from sparkmq.remoting.connection import WRITE_HIGH_WATER_BYTES
from sparkmq.remoting.limits import MAX_IN_FLIGHT_REQUESTS

# A lane call's buffer starts at most this big (a heap block under the services' 16 MiB mmap
# threshold, cli/service.keep_freed_memory); it grows past it when the frames need more.
MAX_RESERVE_BYTES = 8 * 1024 * 1024
# Values no real response holds, replaced by each pull's own when its response is encoded.
_SENTINELS = (2147480017, 9007199254740019, 9007199254740021, 9007199254740023, 9007199254740027)


def pull_template() -> PullParts | None:
    """The JSON header of a pull's SUCCESS response cut around its opaque and four offsets,
    rendered by ``RemotingCommand`` itself (None if the cut is ambiguous)."""
    opaque, *offsets = _SENTINELS
    fields = PullMessageResponseHeader(*offsets).to_fields()
    header = RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque).make_response(ext_fields=fields).encode()[8:]
    parts = cut_around(header, _SENTINELS)
    return None if parts is None else (parts[0], parts[1], parts[2], parts[3], parts[4], parts[5])


class PullLane:
    """Serves the leading plain pulls of a read (see the module)."""

    def __init__(self, processor: PullProcessor, native: ModuleType, parts: PullParts) -> None:
        self.processor = processor
        self._scan = native.scan_pulls
        self._parts = parts
        self._reserve = 0  # the last call's frames' bytes: the next call's buffer starts that big

    def __call__(self, buffer: bytes | bytearray, position: int, connection: RemotingConnection) -> int:
        """Serve the plain pulls at ``buffer[position:]``; the position after the last one served."""
        start = time.perf_counter()
        # One buffer for the call's frames (no join): C appends each, reserving the last call's size.
        out, served, end, parts, reserve = bytearray(), 0, position, self._parts, self._reserve
        serve = self.processor.serve_frame
        for item in self._scan(buffer, position, MAX_IN_FLIGHT_REQUESTS, MAX_FRAME_BYTES):
            if len(out) >= WRITE_HIGH_WATER_BYTES or connection.backlogged:
                break  # the rest wait for the peer to read, on the usual path
            kept = len(out)
            try:
                written = serve(item[1], item[2:], parts, out, reserve)
            except Exception:  # noqa: BLE001 - the usual path serves it again and answers the failure
                written = None
            if written is None:
                del out[kept:]  # a frame appended before a failure is not answered twice
                break
            served += 1
            end = item[0]
        if served:
            self._reserve = min(len(out), MAX_RESERVE_BYTES)
            connection.write_frame(out)  # out is this call's own buffer, never changed after
            elapsed_ms = (time.perf_counter() - start) * 1000
            self.processor.ctx.stats.rpc_many(RequestCode.PULL_MESSAGE, ResponseCode.SUCCESS, elapsed_ms, served)
        return end


def pull_lane(processor: PullProcessor, native: ModuleType | None) -> PullLane | None:
    """The pull lane over ``processor``, or None without the extension (the Python path serves all)."""
    parts = None if native is None else pull_template()
    return None if native is None or parts is None else PullLane(processor, native, parts)
