"""The README cannot drift from the code it documents."""

from __future__ import annotations

import re
from pathlib import Path

from resumable.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _env_name(field: str) -> str:
    return {"database_url": "DATABASE_URL", "redis_url": "REDIS_URL"}.get(
        field, f"RESUMABLE_{field.upper()}"
    )


def test_every_setting_is_in_the_configuration_table() -> None:
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", README, flags=re.MULTILINE))
    expected = {_env_name(name) for name in Settings.model_fields}
    assert documented == expected


def test_readme_starts_with_the_two_setup_commands() -> None:
    block = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block[0].endswith(".venv/bin/resumable demo")
    assert block[1].endswith(".venv/bin/python -m pytest")
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert block[1] in ci.splitlines()


def test_the_readme_agent_is_valid_code() -> None:
    source = README.split("## A small agent", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(source, "README.md", "exec"), namespace)
    agent = namespace["support"]
    from resumable import Agent

    assert isinstance(agent, Agent)
    assert agent.step_names == ["plan", "ask_approval", "charge_customer", "finish"]
