"""Log lines name their session, as text and as JSON."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from resumable._internal.logs import JsonFormatter, SessionFilter, log_context, session_context


@pytest.fixture
def json_lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(SessionFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, out
    logger.removeHandler(handler)


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_each_json_line_carries_the_context_and_the_extras(
    json_lines: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = json_lines
    logger.info("outside")
    with session_context("s-1"), log_context(agent="refund", epoch=3):
        logger.warning("step %s done", "book", extra={"action": "step_committed"})
        with log_context(step="book"):
            try:
                raise ValueError("boom \u2603")
            except ValueError:
                logger.exception("failed")
    outside, done, failed = _lines(out)
    assert "session_id" not in outside and outside["message"] == "outside"
    assert done["session_id"] == "s-1" and done["agent"] == "refund" and done["epoch"] == 3
    assert (done["message"], done["action"], done["level"]) == (
        "step book done",
        "step_committed",
        "WARNING",
    )
    assert done["logger"] == "tests.logs" and str(done["time"]).endswith("+00:00")
    assert failed["step"] == "book" and "ValueError: boom \u2603" in str(failed["exception"])


def test_a_call_may_name_its_own_session(json_lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = json_lines
    with session_context("s-1"):
        logger.info("about another", extra={"session_id": "s-2"})
    [line] = _lines(out)
    assert line["session_id"] == "s-2"
