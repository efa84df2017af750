"""examples/research_team.py on a real worker: fan-out to five researchers
through a semaphore, a shared source cache, fan-in, a review by signal."""

from __future__ import annotations

from resumable.client import Client
from tests.conftest import LocalDeployment, wait_until

TOPICS = ["agents", "leases", "locks", "queues", "sagas"]


def test_the_research_team_fans_out_fans_in_and_waits_for_its_review(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker("examples.research_team")
    team = client.start(
        "research_team", {"question": "How do agents coordinate?", "topics": TOPICS}
    )
    wait_until(lambda: client.get(team).status == "suspended" and "report" in client.state(team))
    report = client.state(team)["report"]
    assert all(f"- {topic}: 2 sources" in report for topic in TOPICS)
    children = client.page_sessions(parent=team).items
    assert sorted(c.status for c in children) == ["completed"] * 5

    client.signal(team, "review", {"approved": False, "feedback": "cite more"})
    wait_until(lambda: "revised" in client.state(team).get("report", ""), what="a rewrite")
    client.signal(team, "review", {"approved": True, "by": "ada"})
    wait_until(lambda: client.get(team).status == "completed", what="approval")
    assert client.get(team).result["approved_by"] == "ada"
    cache = client.shared("research_team:sources")
    assert cache is not None and sorted(cache.value) == TOPICS and cache.version == 5
