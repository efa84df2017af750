"""Without the ``otel`` extra (its import blocked in a fresh interpreter)
nothing of OpenTelemetry is imported, configuring it says why and stays off,
and every hook passes through."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

_SCRIPT = textwrap.dedent(
    """
    import importlib.abc, logging, sys, uuid

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(name)
            return None

    sys.meta_path.insert(0, Block())
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    import resumable.queue.worker, resumable.scheduler.jobs, resumable.webhooks.app
    from resumable import tracing
    from resumable.queue.observing import observe_step, observed_tool_call

    assert not tracing.configure_tracing("resumable-test")
    assert not tracing.enabled()
    with tracing.session_start("agent", uuid.uuid4()) as carrier:
        assert carrier is None
    with tracing.remote_parent({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}):
        pass
    assert observed_tool_call("t", "k", lambda x: x + 1, 1) == 2
    assert not [m for m in sys.modules if m.startswith("opentelemetry")]
    print("ok")
    """
)


def test_without_the_otel_extra_tracing_is_off_and_nothing_is_imported() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "the otel extra is not installed" in done.stderr
