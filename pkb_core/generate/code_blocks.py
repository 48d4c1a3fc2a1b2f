"""Finding the solution file in a model's reply: its fenced code blocks.

The rule: the last block fenced as ```python (or ```py), else the only
fenced block of any language; blank blocks do not count. A fence that is never closed (a reply cut off
by the token limit) holds no code: a truncated file would only fail later.
"""
from __future__ import annotations

import re

# A fence opens with ``` or ~~~ at the start of a line (indented at most 3
# spaces, as in CommonMark), an optional info string, and closes with the same
# fence characters on a line of their own.
_BLOCK = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<code>.*?)^ {0,3}(?P=fence)[ \t]*$",
                    re.MULTILINE | re.DOTALL)
PYTHON_TAGS = {"python", "py", "python3"}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``[(language, code)]`` of the closed fenced blocks in ``text``, in order."""
    blocks = []
    for match in _BLOCK.finditer(text):
        words = match.group("info").strip().split()
        blocks.append((words[0].lower() if words else "", match.group("code")))
    return blocks


def extract_solution(text: str) -> str | None:
    """The code of the solution file in a reply, or ``None`` when there is none."""
    blocks = [(language, code) for language, code in fenced_blocks(text) if code.strip()]
    python = [code for language, code in blocks if language in PYTHON_TAGS]
    if python:
        code = python[-1]
    elif len(blocks) == 1:
        code = blocks[0][1]
    else:
        return None
    return code if code.endswith("\n") else code + "\n"
