"""A read of whole rows answers a dataclass of ``models/records.py``, whose
fields name the statement's columns (``models/columns.py``); the migrations
and the schema test use the SQLModel classes of ``models/tables.py``. Each
dataclass must stay its table class, field for field (name, order, type and
default), or a read would miss a column the migrations added."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic_core import PydanticUndefined
from sqlmodel import SQLModel

from resumable.models import records, tables


@pytest.mark.parametrize(
    ("record", "table"),
    [
        (records.ToolCallRecord, tables.ToolCallRow),
        (records.CallbackRecord, tables.CallbackRow),
        (records.AuditEventRecord, tables.AuditEventRow),
        (records.SessionRecord, tables.SessionRow),
        (records.DeadLetterRecord, tables.DeadLetterRow),
        (records.ScheduleRecord, tables.ScheduleRow),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_each_record_is_its_table_class_field_for_field(
    record: type, table: type[SQLModel]
) -> None:
    ours = [
        (f.name, f.type, "required" if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(record)
    ]
    theirs = [
        (
            name,
            table.__annotations__[name],
            "required" if f.default is PydanticUndefined else f.default,
        )
        for name, f in table.model_fields.items()
    ]
    assert ours == theirs


def test_a_record_s_defaults_are_its_table_s_for_a_missing_value() -> None:
    """Where the table has no default, neither has the record: a statement
    that forgot such a column fails loudly instead of reading None."""
    with pytest.raises(TypeError, match="agent"):
        records.SessionRecord(id=None, status="pending")  # type: ignore[call-arg,arg-type]
