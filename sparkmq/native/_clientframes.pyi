"""Types of the C extension sparkmq.native._clientframes (clientframes.c)."""

class Answer(tuple[int, int, int, int, str | None, str | None, dict[str, str] | None]):
    """A plain answer's header fields, as PlainHeader names them."""

    code: int
    opaque: int
    flag: int
    version: int
    language: str | None
    remark: str | None
    ext_fields: dict[str, str] | None

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
