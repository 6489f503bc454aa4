"""How the console shows keys and values (exactly/app/http/console/record_view.py): what auto picks,
what each asked-for format shows, and that hex never loses a byte."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exactly.app.http.console.record_view import FORMATS, show


@pytest.mark.parametrize("data, format_, text", [
    (None, "null", "null"),
    (b"", "text", ""),
    (b"order 42\ttab\nline", "text", "order 42\ttab\nline"),
    ("caf\u00e9 \u2603".encode(), "text", "caf\u00e9 \u2603"),
    (b'{"id":1,"items":[2]}', "json", '{\n  "id": 1,\n  "items": [\n    2\n  ]\n}'),
    (b"[1, 2]", "json", "[\n  1,\n  2\n]"),
    (b"42", "text", "42"),  # a JSON number is shown as the text it is
    (b"{not json", "text", "{not json"),
    (b"\x00\x01\xff", "hex", "00 01 ff"),
    (b"ok\x07bell", "hex", "6f 6b 07 62 65 6c 6c"),  # valid UTF-8, but a control character
])
def test_auto_picks_json_text_or_hex(data, format_, text):
    shown = show(data)
    assert (shown.format, shown.text, shown.fallback) == (format_, text, None)


def test_an_asked_for_format_falls_back_to_auto_and_says_so():
    assert (show(b"plain", "json").format, show(b"plain", "json").fallback) == ("text", "json")
    assert (show(b"\xff", "text").format, show(b"\xff", "text").fallback) == ("hex", "text")
    assert show(b'{"a": 1}', "text").text == '{"a": 1}'  # text shows JSON as typed
    assert show(b"abc", "hex").text == "61 62 63"
    assert show(None, "hex").format == "null"


def test_preview_is_one_bounded_line():
    shown = show(json.dumps({"k": "v" * 500}).encode())
    assert "\n" not in shown.preview() and len(shown.preview()) == 160 and shown.preview().endswith("…")
    assert show(b"short").preview() == "short"


@given(st.binary(max_size=200), st.sampled_from(FORMATS))
def test_every_byte_is_shown_in_hex_and_text_is_the_utf8(data, format_):
    shown = show(data, format_)
    if shown.format == "hex":
        assert bytes.fromhex(shown.text) == data
    elif shown.format == "text":
        assert shown.text.encode() == data
    else:
        assert shown.format == "json" and json.loads(shown.text) == json.loads(data)
    assert shown.size == len(data)
