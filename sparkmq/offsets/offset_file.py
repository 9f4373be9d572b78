"""consumerOffset.json: durable storage of a :class:`ConsumerOffsetTable`.

The file has RocketMQ's shape, ``{"offsetTable": {"topic@group": {"0": 5, ...}}}``. sparkmq
writes standard JSON (quoted keys, tab-indented, keys sorted, as fastjson pretty-prints) and
reads fastjson's own output too, whose integer map keys are unquoted (``{0:5,1:7}``).

A persist never leaves the file half-written: the new content goes to ``<file>.tmp`` and is
fsynced, the current file (when it parses) is copied to ``<file>.bak``, the ``.tmp`` is renamed
over the file and the directory is fsynced. A load falls back to ``<file>.bak`` when the file is
unusable, and says so with :class:`OffsetFileRecoveredWarning`.
"""

from __future__ import annotations

import json
import os
import re

from sparkmq.config_file import ConfigFile, ConfigFileRecoveredWarning
from sparkmq.errors import InvalidFieldError, OffsetStoreError
from sparkmq.offsets.table import TOPIC_GROUP_SEPARATOR, ConsumerOffsetTable, OffsetSnapshot
from sparkmq.protocol import fastjson

_DECIMAL_INTEGER = re.compile(r"-?[0-9]+")


class OffsetFileRecoveredWarning(ConfigFileRecoveredWarning):
    """consumerOffset.json was unusable and the offsets were loaded from its ``.bak`` copy."""


def decode_offset_table(text: str) -> OffsetSnapshot:
    """Parse consumerOffset.json text (standard JSON or fastjson's) into a snapshot.

    Raises :class:`OffsetStoreError` saying what is wrong when the text is not a consumer
    offset document.

    Example::

        >>> decode_offset_table('{"offsetTable":{"TopicTest@CID_TEST":{0:5,1:3}}}')
        {('TopicTest', 'CID_TEST'): {0: 5, 1: 3}}
    """
    if not text.strip():
        raise OffsetStoreError("the file is empty")
    try:  # fastjson's reader: it takes the unquoted integer keys Java writes
        document = fastjson.loads(text, what="consumerOffset.json")
    except InvalidFieldError as exc:
        raise OffsetStoreError(f"not valid JSON: {exc.remark}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("offsetTable"), dict):
        raise OffsetStoreError('expected a JSON object with an "offsetTable" object')
    snapshot: OffsetSnapshot = {}
    for topic_at_group, queue_offsets in document["offsetTable"].items():
        topic, separator, group = topic_at_group.partition(TOPIC_GROUP_SEPARATOR)
        if not separator:
            raise OffsetStoreError(f"offsetTable key {topic_at_group!r} is not 'topic@group'")
        if not isinstance(queue_offsets, dict):
            raise OffsetStoreError(f"offsetTable[{topic_at_group!r}] is not an object")
        snapshot[(topic, group)] = _decode_queue_offsets(topic_at_group, queue_offsets)
    return snapshot


def _decode_queue_offsets(topic_at_group: str, queue_offsets: dict[str, object]) -> dict[int, int]:
    decoded: dict[int, int] = {}
    for queue_key, offset in queue_offsets.items():
        if not _DECIMAL_INTEGER.fullmatch(queue_key):
            raise OffsetStoreError(f"offsetTable[{topic_at_group!r}] has non-integer queue id {queue_key!r}")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise OffsetStoreError(f"offsetTable[{topic_at_group!r}][{queue_key}] is {offset!r}, not an integer offset")
        decoded[int(queue_key)] = offset
    return decoded


def encode_offset_table(snapshot: OffsetSnapshot) -> str:
    """Render a snapshot as standard JSON in RocketMQ's consumerOffset.json shape.

    Example::

        >>> text = encode_offset_table({("TopicTest", "CID_TEST"): {1: 3, 0: 5}})
        >>> json.loads(text)
        {'offsetTable': {'TopicTest@CID_TEST': {'0': 5, '1': 3}}}
        >>> text.splitlines()[1]
        '\\t"offsetTable": {'
    """
    by_key = {
        f"{topic}{TOPIC_GROUP_SEPARATOR}{group}": queue_offsets for (topic, group), queue_offsets in snapshot.items()
    }
    offset_table = {
        key: {str(queue_id): by_key[key][queue_id] for queue_id in sorted(by_key[key])} for key in sorted(by_key)
    }
    return json.dumps({"offsetTable": offset_table}, indent="\t") + "\n"


class OffsetFile:
    """consumerOffset.json at ``path``, with its ``.bak`` and ``.tmp`` siblings (see ConfigFile).

    A missing file (and no ``.bak``) loads as an empty table. A crash during :meth:`persist`
    leaves either the old or the new file in place, never a mix; a stray ``.tmp`` is ignored.

    Example::

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     offset_file = OffsetFile(os.path.join(directory, "consumerOffset.json"))
        ...     table = offset_file.load()
        ...     table.commit("CID_TEST", "TopicTest", 0, 5)
        ...     offset_file.persist(table)
        ...     OffsetFile(offset_file.path).load().query("CID_TEST", "TopicTest", 0)
        5
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Point at ``path``; nothing is read or created until :meth:`load` or :meth:`persist`."""
        self._file: ConfigFile[ConsumerOffsetTable] = ConfigFile(
            path, _table_from_text, _text_of_table, OffsetStoreError, OffsetFileRecoveredWarning
        )
        self.path = self._file.path
        self.backup_path = self._file.backup_path
        self.tmp_path = self._file.tmp_path

    def load(self) -> ConsumerOffsetTable:
        """Read the offsets, falling back to ``.bak`` when the file is missing or unusable.

        Warns :class:`OffsetFileRecoveredWarning` after a fallback; raises
        :class:`OffsetStoreError` naming both files when neither is usable.
        """
        table = self._file.load()
        return ConsumerOffsetTable() if table is None else table

    def persist(self, table: ConsumerOffsetTable) -> None:
        """Write ``table`` durably; raises :class:`OffsetStoreError` when the disk refuses."""
        self._file.persist(table)

    def __repr__(self) -> str:
        return f"OffsetFile({str(self.path)!r})"


def _table_from_text(text: str) -> ConsumerOffsetTable:
    return ConsumerOffsetTable(decode_offset_table(text))


def _text_of_table(table: ConsumerOffsetTable) -> str:
    return encode_offset_table(table.snapshot())
