"""Tables that fit the terminal (80 columns through a pipe): every column as
wide as its widest cell, up to a cap, and one column, the long text, takes
what is left. Rich's own fitting shrank every column alike and cut ids and
headers to ``sessi…``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rich import box
from rich.table import Table

from resumable.cli.failures import console

# The widest a fixed column grows (an agent or step name past it is cut).
MAX_FIXED = 20
# The least the flexible column keeps, however narrow the terminal.
MIN_FLEXIBLE = 12
# Between two columns: padding, the (blank) rule, padding.
_GAP = 3


def fitted(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    flexible: str,
    wrap: bool = False,
    right: Sequence[str] = (),
    whole: Sequence[str] = (),
    width: int | None = None,
) -> Table:
    """A table of `rows` under `headers` whose `flexible` column takes the
    width the others leave; it wraps within its cell if `wrap`, else it is
    cut with an ellipsis (one line per row). `right`: columns of numbers;
    `whole`: columns never cut (ids asked for in full)."""
    total = width or console.width
    widths = []
    for i, header in enumerate(headers):
        widest = max([len(header), *(len(row[i]) for row in rows)])
        widths.append(widest if header in whole else min(MAX_FIXED, widest))
    index = list(headers).index(flexible)
    others = sum(w for i, w in enumerate(widths) if i != index)
    widths[index] = max(MIN_FLEXIBLE, total - others - _GAP * (len(headers) - 1))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for i, (header, column_width) in enumerate(zip(headers, widths, strict=True)):
        overflow: Literal["fold", "ellipsis"] = "fold" if wrap and i == index else "ellipsis"
        table.add_column(
            header,
            width=column_width,
            no_wrap=overflow == "ellipsis",
            overflow=overflow,
            justify="right" if header in right else "left",
        )
    for row in rows:
        table.add_row(*row)
    return table
