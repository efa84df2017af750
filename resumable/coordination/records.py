"""Shared documents as the Python client, the HTTP API and the CLI show them
(frozen records, like ``resumable.schemas``)."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import Field

from resumable.models.coordination_queries import SharedDocument as SharedDocumentRow
from resumable.models.coordination_queries import SharedVersion as SharedVersionRow
from resumable.schemas import JsonValue, Record


class SharedDocument(Record):
    """A named JSON document shared by sessions, as committed now."""

    name: str
    value: JsonValue = Field(description="The JSON value; null if never written.")
    version: int = Field(description="How many updates committed (0: never written).")
    updated_at: datetime
    updated_by: uuid.UUID | None = Field(description="The session that wrote it last.")

    @classmethod
    def from_row(cls, row: SharedDocumentRow) -> SharedDocument:
        return cls(
            name=row.name,
            value=row.value,
            version=row.version,
            updated_at=row.updated_at,
            updated_by=row.updated_by,
        )


class SharedVersion(Record):
    """One committed value of a shared document, and the step that wrote it."""

    name: str
    version: int
    value: JsonValue
    session_id: uuid.UUID
    seq: int = Field(description="The writing step's checkpoint sequence number.")
    step: str
    at: datetime

    @classmethod
    def from_row(cls, row: SharedVersionRow) -> SharedVersion:
        return cls(
            name=row.name,
            version=row.version,
            value=row.value,
            session_id=row.session_id,
            seq=row.seq,
            step=row.step,
            at=row.created_at,
        )
