"""Messages between the launcher and its worker processes: JSON lines over pipes.

Each worker reads commands from its standard input and writes its answers to a
separate pipe (the descriptor in ``PKB_REPLY_FD``), never to standard output:
a candidate prints what it likes into the log, but only the harness's writes
on the reply pipe are read as messages. A message is one JSON object on one
line. A command has an ``op``; the answer to it has the same ``op`` and either
the command's results or ``error``; what each op carries either way is a
contract (:mod:`pkb_core.contracts.commands`). Between them a worker may send
*events* (``{"event": name, ...}``): things the launcher counts, such as a
solution's barrier calls.

What a candidate's process writes is untrusted: the launcher reads at most
:data:`MAX_LINE` bytes per message, parses it as plain JSON (no objects are
built from it) and reads each answer once with its answer class
(:meth:`pkb_core.launch.ranks.RankGroup.gather`).
"""
from __future__ import annotations

import json
import os

#: The longest message accepted (skeletons of large argument trees fit easily).
MAX_LINE = 64 << 20
#: Deepest nesting of lists and objects a message may have (argument trees are a few levels deep);
#: deeper messages are malformed, so no later ``json`` call meets a recursion limit.
MAX_DEPTH = 64
#: Lists and objects one message may hold, counted in its text before it is parsed: the largest
#: answer holds a batch's skeletons (tens of windows of tens of tensors; the most leaves of any
#: built-in problem's arguments is 25), and parsing 64 MiB of ``{},{},...`` (22 million objects)
#: took a launcher 3 GB and 50 s a line (a hostile review, 2026-12-02).
MAX_CONTAINERS = 1 << 19
#: Bytes a worker may have waiting at once: one command's answer is one message.
MAX_BUFFERED = 2 * MAX_LINE
REPLY_FD_ENV = "PKB_REPLY_FD"


def send_line(stream, message: dict) -> bool:
    """One message to a process's input (a binary stream: a worker's stdin, a lane's); False when
    the process is gone (its end closed), which the caller treats as the process's end."""
    try:
        stream.write((json.dumps(message) + "\n").encode())
        stream.flush()
        return True
    except (BrokenPipeError, OSError, ValueError):
        return False


class ChannelClosed(EOFError):
    """The other side closed its end (the launcher went away)."""


class WorkerChannel:
    """The worker's end: commands in on stdin, answers and events out on the reply pipe."""

    def __init__(self, read_fd: int = 0, write_fd: int | None = None):
        self._in = os.fdopen(read_fd, "rb", buffering=1 << 16, closefd=False)
        self._out = int(os.environ[REPLY_FD_ENV]) if write_fd is None else write_fd

    def receive(self) -> dict:
        line = self._in.readline()
        if not line:
            raise ChannelClosed("the launcher closed the command pipe")
        return json.loads(line)

    def send(self, message: dict) -> None:
        data = (json.dumps(message, allow_nan=True) + "\n").encode()
        view = memoryview(data)
        while view:
            written = os.write(self._out, view)
            view = view[written:]


class LineReader:
    """The launcher's end of one reply pipe: non-blocking reads, complete lines out."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        self._buffer = bytearray()
        self.closed = False

    def discard(self) -> None:
        """Drop everything the worker has written so far, complete lines or not."""
        self._drain(keep=False)
        self._buffer.clear()

    def _drain(self, keep: bool) -> bool:
        """Read what the pipe holds now (kept in the buffer when ``keep``); sets
        :attr:`closed` at EOF. False when an over-long line was dropped."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return True
            if not chunk:
                self.closed = True
                return True
            if keep:
                self._buffer += chunk
                if len(self._buffer) > MAX_BUFFERED or (len(self._buffer) > MAX_LINE and b"\n" not in self._buffer):
                    self._buffer.clear()
                    return False

    def read_messages(self) -> list:
        """Every complete message available now (``[]`` if none); sets :attr:`closed` at EOF.

        A line that is not a JSON object, is longer than :data:`MAX_LINE`, holds more than
        :data:`MAX_CONTAINERS` lists and objects or nests deeper than :data:`MAX_DEPTH`, or more
        than :data:`MAX_BUFFERED` bytes waiting at once, becomes ``{"malformed": text}`` for the
        caller to judge.
        """
        if not self._drain(keep=True):
            return [{"malformed": f"a message longer than {MAX_LINE} bytes, or more than {MAX_BUFFERED} "
                                  f"bytes written at once"}]
        messages = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(self._buffer[:end])
            del self._buffer[:end + 1]
            if line.count(b"{") + line.count(b"[") > MAX_CONTAINERS:  # an over-count is only brackets in strings
                messages.append({"malformed": f"more than {MAX_CONTAINERS} lists and objects in one message"})
                continue
            try:
                message = json.loads(line)
            except Exception:  # noqa: BLE001 - not JSON, or nested past the parser's recursion limit
                message = {"malformed": line[:200].decode(errors="replace")}
            if not isinstance(message, dict):
                message = {"malformed": f"a JSON {type(message).__name__}, not an object"}
            elif _depth(message) > MAX_DEPTH:
                message = {"malformed": f"nested deeper than {MAX_DEPTH} levels"}
            messages.append(message)
        return messages


def _depth(value) -> int:
    """How deeply ``value`` nests lists and objects (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
