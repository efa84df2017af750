"""`resumable dev`'s banner says which agents the worker runs, and says so
when none was named and the demo agent stands in (issue 41: it used to run
the demo agent without a word)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from resumable._internal.embedded import ServiceURLs
from resumable.dev import DEMO_AGENTS, _print_banner
from resumable.dev.procfile import load_processes
from resumable.settings import Settings


def _banner(tmp_path: Path, agents: list[str], broker_url: str | None = None) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    settings = Settings(home=tmp_path, api_tokens=["t" * 32], broker_url=broker_url)
    urls = ServiceURLs("postgresql://u@127.0.0.1:5432/db", "redis://127.0.0.1:6379/0")
    _print_banner(
        console, settings, urls, agents, load_processes(tmp_path), "http://127.0.0.1:8000", "0019"
    )
    return out.getvalue()


def test_no_agents_named_says_the_demo_agent_runs_and_how_to_name_yours(tmp_path: Path) -> None:
    text = _banner(tmp_path, list(DEMO_AGENTS))
    assert "resumable.demo.agent" in text
    assert "none named: the demo agent" in text
    assert "--agents MODULE" in text


def test_named_agents_are_listed_without_the_demo_hint(tmp_path: Path) -> None:
    text = _banner(tmp_path, ["myapp.agents"])
    assert "agents     myapp.agents" in text
    assert "demo" not in text


def test_a_rabbitmq_broker_is_named_without_its_password(tmp_path: Path) -> None:
    text = _banner(tmp_path, ["myapp.agents"], "amqp://app:s3cret@rabbit:5672/prod")
    assert "broker     RabbitMQ at rabbit:5672 (vhost 'prod')" in text
    assert "s3cret" not in text
    assert "broker     " not in _banner(tmp_path, ["myapp.agents"])
