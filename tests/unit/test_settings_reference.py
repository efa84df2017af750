"""docs/configuration.md is generated from the settings and must not go stale."""

from __future__ import annotations

import re
from pathlib import Path

import annotated_types

from resumable.cli.settings_reference import render, variable
from resumable.settings import Settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_docs_configuration_md_is_up_to_date() -> None:
    assert REFERENCE.read_text() == render(), (
        "docs/configuration.md is stale: run "
        "`python -m resumable.cli.settings_reference > docs/configuration.md`"
    )


def test_every_setting_has_one_row_with_its_variable_and_default() -> None:
    text = REFERENCE.read_text()
    documented = re.findall(r"^\| `([A-Z_]+)` \|", text, flags=re.MULTILINE)
    assert documented == [variable(name, info) for name, info in Settings.model_fields.items()]
    assert "| `RESUMABLE_LEASE_SECONDS` | `30` |" in text
    assert "| `DATABASE_URL` | unset |" in text  # read under its own name
    assert "Also read as `RESUMABLE_DATABASE_URL`" in text


def test_every_bound_and_choice_is_stated() -> None:
    text = REFERENCE.read_text()
    for name, info in Settings.model_fields.items():
        [row] = re.findall(rf"^\| `{variable(name, info)}` \|.*$", text, flags=re.MULTILINE)
        for item in info.metadata:
            if isinstance(item, annotated_types.Gt):
                assert f"more than {float(str(item.gt)):g}" in row, row
            if isinstance(item, annotated_types.Ge):
                assert f"at least {float(str(item.ge)):g}" in row, row
            if isinstance(item, annotated_types.Le):
                assert re.search(rf"at most {float(str(item.le)):.0f}\b", row), row
    assert "Allowed: `text`, `json`." in text
    assert "Allowed: `delete`, `archive`." in text
