"""The agents table: which agents, steps and checks the live workers serve."""

from __future__ import annotations

REGISTER_AGENT = """
INSERT INTO agents (name, steps, checks, updated_at)
VALUES (%(name)s, %(steps)s::jsonb, %(checks)s::jsonb, now())
ON CONFLICT (name) DO UPDATE SET steps = EXCLUDED.steps, checks = EXCLUDED.checks,
                                 updated_at = now()
"""

# Whether a worker announced this agent (a web process without agent code checks
# names against it).
AGENT_KNOWN = "SELECT 1 FROM agents WHERE name = %s"
