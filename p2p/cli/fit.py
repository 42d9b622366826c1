"""Tables that fit the terminal: columns are shortened or dropped, values never broken.

:func:`fit_table` takes a built :class:`rich.table.Table` and the width it
must fit. Every cell stays on one line (a number or an id is never broken
across lines) except the columns named free text, which wrap between words.
When the table is too wide, columns get their short headers first, then the
columns named in ``drop`` go, in that order; a caption line names what is not
shown (``--json`` shows everything). With more room than the table needs,
nothing changes. See docs/guide/operations.md (inspecting a running node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

__all__ = ["fit_table", "table_width"]

_MEASURE = Console(width=10_000, color_system=None, force_terminal=False)


def _widths(column: Column, wrap: bool) -> tuple[int, int]:
    """(narrowest, widest) the column can be: a wrapping column down to its longest word."""
    header = column.header if isinstance(column.header, str | Text) else str(column.header)
    cells = [header, *column._cells]
    measured = [Measurement.get(_MEASURE, _MEASURE.options, c) for c in cells]
    widest = max(m.maximum for m in measured)
    narrowest = max(m.minimum for m in measured) if wrap else widest
    return narrowest, widest


def table_width(table: Table, wrap: Sequence[str] = ()) -> tuple[int, int]:
    """(narrowest, widest) ``table`` can be drawn, borders and padding included."""
    overhead = 3 * len(table.columns) + 1
    sizes = [_widths(c, str(c.header) in wrap) for c in table.columns]
    return (sum(n for n, _ in sizes) + overhead, sum(w for _, w in sizes) + overhead)


def fit_table(table: Table, width: int, *, drop: Sequence[str] = (),
              short: Mapping[str, str] | None = None, wrap: Sequence[str] = ()) -> Table:
    """``table`` made to fit ``width`` columns (see the module docstring); ``drop`` and
    ``wrap`` name columns by header, ``short`` maps headers to shorter ones."""
    for column in table.columns:
        free = str(column.header) in wrap
        column.no_wrap = not free
        column.overflow = "ellipsis"  # a word longer than its column is cut, never folded
    if table_width(table, wrap)[1] <= width:
        return table
    short = short or {}
    for column in table.columns:
        header = str(column.header)
        if header in short:
            column.header = short[header]
    wrap = [short.get(h, h) for h in wrap]
    dropped = []
    for name in drop:
        if table_width(table, wrap)[0] <= width:
            break
        for column in list(table.columns):
            if str(column.header) in (name, short.get(name)):
                table.columns.remove(column)
                dropped.append(name.replace("\n", " "))
    for i, column in enumerate(table.columns):
        column._index = i
    if dropped:
        note = f"not shown at {width} columns: {', '.join(dropped)} (--json shows everything)"
        table.caption = note if not table.caption else f"{table.caption}\n{note}"
        table.caption_justify = "left"
    return table
