"""The README read as the tests hold it to the code: its sections, their fenced blocks, the tables it lists.

>>> [b.lang for b in blocks(section("Your first job"))]
['sh', 'python', 'sh', 'python', 'python', 'sh', 'text']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
TABLE_ROW = re.compile(r"^\| (`x_\w+`(?:, `x_\w+`)*) \|", re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block: its language tag and its text (ending with a newline)."""

    lang: str
    body: str

    @property
    def first_line(self) -> str:
        return self.body.splitlines()[0] if self.body else ""


def section(title: str) -> str:
    """The text under the README's ``## title`` heading, up to the next ``## `` heading."""
    text = README.read_text()
    head = f"\n## {title}\n"
    assert head in text, f"the README has no section {title!r}"
    body = text.split(head, 1)[1]
    return body.split("\n## ", 1)[0]


def blocks(text: str) -> list[Block]:
    """Every fenced block of ``text``, in order."""
    return [Block(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def documented_tables() -> list[str]:
    """The ``x_*`` tables the README's table list names (one or more per row's first cell)."""
    text = section("The Postgres driver: tables and statements")
    return [name.strip("`") for cell in TABLE_ROW.findall(text) for name in cell.split(", ")]
