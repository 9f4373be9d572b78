"""Types of the C extension built from leanrecords.c."""

# count, then the Arrow buffers: queueId, queueOffset, bornTimestamp, storeTimestamp, body (offsets, data),
# keys (offsets, data, validity), tags (offsets, data, validity), msgId (offsets, data)
Decoded = tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes]

def decode(buffer: bytes | bytearray | memoryview, /) -> Decoded | None: ...
