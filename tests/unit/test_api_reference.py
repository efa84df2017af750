"""docs/api.md is generated from the routes and their models and must not go stale."""

from __future__ import annotations

from pathlib import Path

from resumable.webhooks.app import ROUTES
from resumable.webhooks.openapi import openapi_document
from resumable.webhooks.reference import render

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_docs_api_md_is_up_to_date() -> None:
    expected = render(openapi_document(ROUTES))
    assert REFERENCE.read_text() == expected, (
        "docs/api.md is stale: run `python -m resumable.webhooks.reference > docs/api.md`"
    )


def test_the_reference_names_every_operation_and_model() -> None:
    document = openapi_document(ROUTES)
    text = REFERENCE.read_text()
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            assert f"### `{method.upper()} {path}`" in text
            assert f"`{operation['operationId']}`" in text
    for name in document["components"]["schemas"]:
        assert f"\n### {name}\n" in text
