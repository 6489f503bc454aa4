"""How the console shows a key, a value or a header value: UTF-8 text, JSON
(pretty-printed) or hex for binary.

``auto`` picks per record: JSON for UTF-8 text that parses as a JSON object or array,
text for other UTF-8 without control characters (tabs and newlines are fine), hex for
everything else. A view may ask for one format for every record (``text``, ``json``,
``hex``); a record that cannot be shown that way falls back to what ``auto`` picks and
says so (``fallback``), never an error page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

FORMATS = ("auto", "text", "json", "hex")
#: characters of a shown value in a list (the detail view shows it whole)
PREVIEW_CHARS = 160


@dataclass(frozen=True)
class Shown:
    """Data as the console shows it: ``format`` is ``null``, ``text``, ``json`` or ``hex``."""

    format: str
    text: str
    size: int
    #: the format asked for, when the data could not be shown that way
    fallback: str | None = None

    def preview(self, limit: int = PREVIEW_CHARS) -> str:
        """One line of at most ``limit`` characters, for a table cell."""
        flat = json.dumps(json.loads(self.text), ensure_ascii=False) if self.format == "json" else self.text
        return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if all(c.isprintable() or c in "\t\n\r" for c in text) else None


def _json(text: str | None) -> str | None:
    if text is None or text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return None


def _hex(data: bytes) -> str:
    return data.hex(" ")


def show(data: bytes | None, fmt: str = "auto") -> Shown:
    """``data`` in ``fmt`` (one of :data:`FORMATS`; anything else counts as ``auto``)."""
    if data is None:
        return Shown("null", "null", 0)
    text = _text(data)
    if fmt == "hex":
        return Shown("hex", _hex(data), len(data))
    if fmt == "text":
        if text is not None:
            return Shown("text", text, len(data))
    elif fmt == "json":
        pretty = _json(text)
        if pretty is not None:
            return Shown("json", pretty, len(data))
    picked = _auto(data, text)
    fallback = fmt if fmt in ("text", "json") else None
    return Shown(picked.format, picked.text, picked.size, fallback)


def _auto(data: bytes, text: str | None) -> Shown:
    pretty = _json(text)
    if pretty is not None:
        return Shown("json", pretty, len(data))
    if text is not None:
        return Shown("text", text, len(data))
    return Shown("hex", _hex(data), len(data))
