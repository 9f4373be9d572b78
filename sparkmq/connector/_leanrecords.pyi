"""Types of the C extension built from leanrecords.c."""

from typing import Literal, overload

# count, then the Arrow buffers: queueId, queueOffset, bornTimestamp, storeTimestamp, body (offsets, data),
# keys (offsets, data, validity), tags (offsets, data, validity), msgId (offsets, data)
Decoded = tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes]
# Decoded, then the properties map: row offsets, keys (offsets, data), values (offsets, data)
DecodedWithProperties = tuple[int, *tuple[bytes, ...]]  # 19 buffers

@overload
def decode(buffer: bytes | bytearray | memoryview, properties: Literal[False] = False, /) -> Decoded | None: ...
@overload
def decode(buffer: bytes | bytearray | memoryview, properties: Literal[True], /) -> DecodedWithProperties | None: ...
