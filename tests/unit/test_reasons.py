"""A reason that must not be blank is refused over HTTP exactly when the
library and the CLI refuse it (`not reason.strip()`): the HTTP rule is a JSON
Schema pattern, so it must name Python's whitespace itself."""

from __future__ import annotations

import json
import re
import sys

import pydantic
import pytest

from resumable.webhooks.request_models import (
    NON_BLANK_PATTERN,
    PYTHON_WHITESPACE,
    BlockedSessionAction,
    DiscardDeadLetter,
)

PYTHON_SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def test_the_pattern_names_every_character_python_strips_and_no_other() -> None:
    spaces = re.compile(f"[{PYTHON_WHITESPACE}]")
    named = [chr(c) for c in range(sys.maxunicode + 1) if spaces.fullmatch(chr(c))]
    assert named == PYTHON_SPACES


@pytest.mark.parametrize("model", [DiscardDeadLetter, BlockedSessionAction])
def test_a_blank_reason_is_refused_as_python_sees_blank(model: type[pydantic.BaseModel]) -> None:
    for space in PYTHON_SPACES:
        for reason in (space, space * 3, f" {space}\t"):
            with pytest.raises(pydantic.ValidationError):
                model.model_validate_json(f'{{"reason": {json.dumps(reason)}}}')
    for reason in ("x", "\x1cx\x1f", " card limit raised ", "\u200b"):
        assert reason.strip(), reason
        assert model.model_validate({"reason": reason}).reason == reason  # type: ignore[attr-defined]
    with pytest.raises(pydantic.ValidationError):
        model.model_validate({"reason": "ok\x00"})


def test_python_re_agrees_with_pydantic() -> None:
    """The same pattern in Python's engine (a JSON Schema validator's stand-in)."""
    pattern = re.compile(NON_BLANK_PATTERN)
    for space in PYTHON_SPACES:
        assert pattern.search(space * 2) is None, repr(space)
    assert pattern.search("\x1cx") is not None
