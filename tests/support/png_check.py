"""Decode a PNG screenshot (8-bit RGB/RGBA, as Chromium writes them) far enough to tell it is not blank."""

from __future__ import annotations

import struct
import zlib
from collections import Counter

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of raw pixel bytes) after undoing the per-row filters."""
    assert png.startswith(PNG_SIGNATURE), "not a PNG"
    pos, idat, width = len(PNG_SIGNATURE), b"", 0
    height = depth = color = 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        data = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", data[:10])
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    assert depth == 8 and color in (2, 6), f"unexpected PNG format: depth {depth}, color type {color}"
    bpp = 3 if color == 2 else 4
    raw, stride, rows = zlib.decompress(idat), width * bpp, []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, row = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = row[i - bpp] if i >= bpp else 0
            up, up_left = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                row[i] = (row[i] + left) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + up) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                row[i] = (row[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        rows.append(bytes(row))
        previous = row
    return width, height, rows


def ink_fraction(png: bytes) -> float:
    """The share of pixels that differ from the most common colour (0.0 for a blank image)."""
    width, _height, rows = pixels(png)
    bpp = len(rows[0]) // width
    colours = Counter(row[i : i + 3] for row in rows[::2] for i in range(0, len(row), bpp * 2))
    total = sum(colours.values())
    return 1 - colours.most_common(1)[0][1] / total
