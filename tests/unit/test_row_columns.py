"""The statements that select whole rows name their columns from
``models/columns.py``, written out so that a worker builds its SQL without
importing the table classes; each tuple must stay the class's fields, in order,
or a read would map a column to the wrong attribute or miss one."""

from __future__ import annotations

import pytest
from sqlmodel import SQLModel

from resumable.models import columns, tables


@pytest.mark.parametrize(
    ("fields", "table"),
    [
        (columns.TOOL_CALL_FIELDS, tables.ToolCallRow),
        (columns.CALLBACK_FIELDS, tables.CallbackRow),
        (columns.AUDIT_EVENT_FIELDS, tables.AuditEventRow),
        (columns.SESSION_FIELDS, tables.SessionRow),
        (columns.DEAD_LETTER_FIELDS, tables.DeadLetterRow),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_each_column_list_is_its_row_class_fields(
    fields: tuple[str, ...], table: type[SQLModel]
) -> None:
    assert fields == tuple(table.model_fields)
