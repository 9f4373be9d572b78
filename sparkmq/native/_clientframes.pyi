"""Types of the C extension sparkmq.native._clientframes (clientframes.c)."""

from collections.abc import Iterator
from typing import Any

class Answer:
    """A plain answer's header fields, as PlainHeader names them (read-only; a sequence of the seven), and a send
    answer's two extFields values (``msg_id``, ``queue_offset``: None when absent)."""

    code: int
    opaque: int
    flag: int
    version: int
    language: str | None
    remark: str | None
    ext_fields: dict[str, str] | None
    msg_id: str | None
    queue_offset: str | None
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Any: ...
    def __iter__(self) -> Iterator[Any]: ...

def render(
    code: int,
    flag: int,
    opaque: int,
    fields: bytes,
    queue_id: int,
    sys_flag: int,
    born_ms: int,
    message_flag: int,
    properties_json: str,
    id_head: str,
    id_tail: int,
    batch: bool,
    body: bytes | bytearray | memoryview,
) -> bytes | None: ...
def answers(data: bytes | bytearray | memoryview, position: int) -> tuple[int, list[Answer]]: ...
