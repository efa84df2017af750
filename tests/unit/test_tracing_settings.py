"""OTEL_* values the OpenTelemetry SDK cannot use stop a process as any bad
setting does (one line naming the variable, exit 1) instead of as an
"unexpected ValueError" or a logged traceback, and nothing is turned on."""

from __future__ import annotations

import pytest

from resumable import tracing
from resumable.errors import ConfigurationError

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        (ENDPOINT, "bogus", "http:// or https:// URL"),
        (ENDPOINT, "http://[::1", "http:// or https:// URL"),
        (ENDPOINT, "http://a\udcff", "http:// or https:// URL"),
        (ENDPOINT, "http://127.0.0.1:99999", "http:// or https:// URL"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector", "with a host"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "whole number from 1"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "1" + "0" * 30, "whole number from 1"),
        ("OTEL_BSP_SCHEDULE_DELAY", "abc", "whole number from 1"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "-1", "whole number from 1"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5000", "must not exceed"),
        ("OTEL_SERVICE_NAME", "web\udcff", "UTF-8"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "number of seconds"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "inf", "number of seconds"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "nan", "number of seconds"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-1", "number of seconds"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.0", "number of seconds"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "86401", "number of seconds"),
    ],
)
def test_an_unusable_otel_value_is_a_configuration_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, why: str
) -> None:
    monkeypatch.setenv(ENDPOINT, "http://127.0.0.1:4318")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        tracing.configure_tracing("resumable-test")
    assert f"invalid setting {variable}: " in caught.value.message
    assert why in caught.value.message
    assert value not in caught.value.message
    assert not tracing.enabled()


@pytest.mark.parametrize("value", ["0.5", " 3 ", "86400", "1e1"])
def test_an_export_timeout_in_seconds_is_taken(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENDPOINT, "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", value)
    # The check alone: turning tracing on would set this process's global
    # tracer provider, which the SDK lets be set only once.
    assert tracing._otel_problem() is None
