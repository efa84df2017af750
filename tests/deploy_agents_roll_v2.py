"""The `roll` agent, version 2 (see tests/deploy_agents_roll_v1.py)."""

from __future__ import annotations

from tests.deploy_agents_roll_v1 import build

roll = build(2)
