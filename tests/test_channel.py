"""The launcher's reading of a worker's reply pipe: whatever a (hostile) worker writes is a message
or a ``malformed`` note for that worker's job, never an exception in the launcher."""
from __future__ import annotations

import os

from pkb_core.process import channel
from pkb_core.process.channel import LineReader


def _reader_with(data: bytes, tmp_path) -> LineReader:
    path = tmp_path / "reply"  # a file, not a pipe: all of it is there at once, nothing blocks
    path.write_bytes(data)
    return LineReader(os.open(path, os.O_RDONLY))


def test_messages_nested_past_the_parser_or_the_depth_limit_are_malformed(tmp_path):
    reader = _reader_with(b"[" * 100000 + b"\n" + b'{"a": ' * 100 + b"1" + b"}" * 100 + b'\n{"op": "x"}\n', tmp_path)
    messages = reader.read_messages()
    assert [sorted(m) for m in messages] == [["malformed"], ["malformed"], ["op"]]
    assert "nested deeper than 64 levels" in messages[1]["malformed"]


def test_a_flood_of_short_lines_is_cut_at_the_buffer_limit(monkeypatch, tmp_path):
    monkeypatch.setattr(channel, "MAX_BUFFERED", 1000)
    reader = _reader_with(b'{"event": "barrier"}\n' * 200, tmp_path)  # 4200 bytes of well-formed lines
    (message,) = reader.read_messages()
    assert "bytes written at once" in message["malformed"]


def test_a_message_of_too_many_lists_and_objects_is_malformed_before_it_is_parsed(tmp_path):
    """Two such lines of 64 MiB cost a launcher 5 GB and a minute (a hostile review, 2026-12-02):
    they are counted in their text, never built."""
    import time

    flood = b'{"event": "barrier", "p": [' + b"{}," * channel.MAX_CONTAINERS + b"{}]}\n"
    reader = _reader_with(flood + b'{"op": "x"}\n', tmp_path)
    started = time.monotonic()
    messages = reader.read_messages()
    assert time.monotonic() - started < 2
    assert "lists and objects in one message" in messages[0]["malformed"] and messages[1] == {"op": "x"}
