"""Write UPDATE_BROKER_CONFIG's values back into the broker.conf the broker was started with.

RocketMQ's ``Configuration.persist`` rewrites the whole ``-c`` file (every setting, comments
lost). sparkmq edits it instead: the lines that set an updated key get the new value, keys the
file did not have are appended, an empty value removes the key (back to its default), and every
other line (comments, order, continuations) stays as the operator wrote it. The file is replaced
atomically with a ``.bak`` of the old one (as ``MixAll.string2File``), and the new text is parsed
before it is written: what the broker reads at its next start is exactly what was applied.

>>> text = "# mine\\nbrokerName=b1\\nmaxMessageSize = 1024\\n"
>>> print(updated_properties_text(text, {"maxMessageSize": "2048", "deleteWhen": "02"}), end="")
# mine
brokerName=b1
maxMessageSize=2048
deleteWhen=02
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from sparkmq.broker.config import parse_properties
from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def _logical_lines(lines: list[str]) -> Iterator[tuple[int, int]]:
    """(first, stop) line spans of the file's logical lines: a line ending in an odd number of
    backslashes continues on the next, as ``java.util.Properties`` reads it."""
    first = 0
    while first < len(lines):
        stop = first
        while stop < len(lines) - 1 and _continues(lines[stop]):
            stop += 1
        yield first, stop + 1
        first = stop + 1


def _continues(line: str) -> bool:
    stripped = line.rstrip("\r\n")
    return (len(stripped) - len(stripped.rstrip("\\"))) % 2 == 1


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _escape(text: str, key: bool) -> str:
    """``java.util.Properties.store``'s escaping (non-ASCII stays UTF-8 text: the file is read as UTF-8)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif key and ch in "=: #!":
            out.append("\\" + ch)
        else:
            out.append(ch)
    escaped = "".join(out)
    return "\\" + escaped if escaped.startswith(" ") else escaped  # a leading blank is kept only escaped


def property_line(key: str, value: str) -> str:
    """One ``key=value`` line that ``java.util.Properties`` reads back as exactly ``key`` and ``value``.

    >>> property_line("namesrvAddr", "a:1;b:2")
    'namesrvAddr=a:1;b:2\\n'
    """
    return f"{_escape(key, key=True)}={_escape(value, key=False)}\n"


def updated_properties_text(text: str, updates: Mapping[str, str]) -> str:
    """``text`` with ``updates`` applied (an empty value removes the key); raises :class:`ConfigError`
    if the result would not read back as ``updates`` say."""
    lines = _LINE.findall(text)  # \n, \r\n or \r only, as Properties.load (not str.splitlines' \x0c, \u2028...)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    out: list[str] = []
    written: set[str] = set()
    for first, stop in _logical_lines(lines):
        block = lines[first:stop]
        keys = list(parse_properties("".join(block), "broker.conf"))
        key = keys[0] if keys else None
        if key is None or key not in updates:
            out += block
        elif updates[key] != "" and key not in written:
            out.append(property_line(key, updates[key]))
            written.add(key)
        # else: an earlier line of this key was rewritten (a later duplicate would win), or removed
    out += [property_line(k, v) for k, v in updates.items() if v != "" and k not in written]
    result = "".join(out)
    reread = parse_properties(result, "the updated broker.conf")
    for key, value in updates.items():
        if reread.get(key, "") != value:
            raise ConfigError(f"broker.conf would not read back {key}={value!r} (got {reread.get(key)!r})")
    return result


def persist_updates(path: Path, updates: Mapping[str, str]) -> None:
    """Apply ``updates`` to the properties file at ``path``, atomically, keeping ``path.bak``.

    Raises :class:`ConfigError` when the file cannot be read or written (nothing is changed then).
    """
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        new_text = updated_properties_text(text, updates)
        if not text:
            new_text = f"# written by updateBrokerConfig {time.strftime('%Y-%m-%d %H:%M:%S')}\n" + new_text
        ConfigFile(path, lambda s: s, lambda s: s, ConfigError).persist(new_text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc}") from exc
