"""The operator console in a real browser: headless Chromium (Debian's
``chromium``; Playwright's own download is not reachable here) driven by
Playwright, against a real ``resumable web`` process and a real worker.

Screenshots of every page a test looks at are saved under its tmp_path.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from resumable.client import Client
from resumable.models.database import Database
from tests.conftest import API_TOKEN, START_TIMEOUT, LocalDeployment, wait_until
from tests.fake_api import FakeAPI
from tests.integration.console_agents import (
    HTTP_URL,
    IMAGE,
    JAVASCRIPT_URL,
    LONG,
    SCRIPT,
)

AGENTS = "tests.integration.console_agents"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# How long a page may take to show what a test waits for.
PAGE_TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    assert CHROMIUM.exists(), (
        "the console's browser tests need Debian's chromium: apt-get install -y chromium "
        "(.ci/run installs it when missing)"
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def console(deployment: LocalDeployment) -> str:
    """A real web process and a worker of the console's test agents (started
    side by side: the browser tests are kept quick)."""
    starting = [deployment.processes.web(deployment.port), deployment.processes.worker(AGENTS)]
    for process in starting:
        process.wait_ready(START_TIMEOUT)
    return deployment.url


class Tab:
    """One browser page with its own cookies, recording any dialog a page opens
    (an alert would mean a value ran as script) and saving screenshots."""

    def __init__(self, page: Page, base: str, shots: Path) -> None:
        self.page = page
        self.base = base
        self.shots = shots
        self.dialogs: list[str] = []
        #: What the browser's console reported as errors (a failed fetch of a
        #: page's resource, a script error), with the URL it was about.
        self.errors: list[str] = []
        page.set_default_timeout(PAGE_TIMEOUT_MS)
        page.on("dialog", self._dialog)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"script: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.text} ({message.location.get('url')})")

    def _dialog(self, dialog: object) -> None:
        self.dialogs.append(str(getattr(dialog, "message", dialog)))
        dialog.dismiss()  # type: ignore[attr-defined]

    def go(self, path: str) -> None:
        self.page.goto(self.base + path)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def log_in(self, name: str = "Ada", token: str = API_TOKEN, *, accepted: bool = True) -> None:
        """Log in; when the login is `accepted`, return once the page it leads
        to has loaded (a click returns before its navigation ends, and a read
        of the page then may see the login form)."""
        if "/ui/login" not in self.page.url:
            self.go("/ui/login")
        self.page.fill("input[name=name]", name)
        self.page.fill("input[name=token]", token)
        self.page.click("button:has-text('Log in')")
        if accepted:
            self.page.wait_for_url(lambda url: "/ui/login" not in url)

    def text(self, selector: str = "main") -> str:
        return self.page.inner_text(selector)


@pytest.fixture
def tab(chromium: Browser, console: str, tmp_path: Path) -> Iterator[Tab]:
    context = chromium.new_context()
    shots = tmp_path / "screenshots"
    shots.mkdir()
    yield Tab(context.new_page(), console, shots)
    context.close()


def _failed(client: Client, *session_ids: uuid.UUID) -> Callable[[], bool]:
    return lambda: all(client.get(s).status == "failed" for s in session_ids)


def test_a_logged_out_browser_is_sent_to_the_login_page(tab: Tab) -> None:
    tab.go("/ui/sessions?status=failed")
    assert "/ui/login?next=" in tab.page.url
    tab.log_in(token="not-the-token", accepted=False)
    assert "not accepted" in tab.text("[role=alert]")
    tab.log_in()
    tab.page.wait_for_url("**/ui/sessions?status=failed")
    assert "Ada" in tab.text("header")
    tab.page.click("button:has-text('Log out')")
    tab.page.wait_for_url("**/ui/login")
    tab.go("/ui/dead-letters")
    assert "/ui/login?next=%2Fui%2Fdead-letters" in tab.page.url
    tab.go("/")
    assert "/ui/login" in tab.page.url
    tab.shot("login")


def test_an_operator_finds_a_dead_letter_reads_its_traceback_and_retries_it_with_a_patch(
    tab: Tab, client: Client, db: Database
) -> None:
    broken = client.start("console_fixable", {"order": 7})
    client.start("console_waiting", {})
    wait_until(_failed(client, broken), what="the session to fail")

    tab.go("/ui/sessions")
    tab.log_in()
    tab.page.select_option("select[name=status]", "failed")
    tab.page.fill("input[name=agent]", "console_fixable")
    tab.page.click("#session-filters button:has-text('Filter')")
    tab.page.wait_for_url("**status=failed**")
    rows = tab.page.locator("#sessions tbody tr")
    assert rows.count() == 1
    rows.locator("a").first.click()
    tab.page.wait_for_url(f"**/ui/sessions/{broken}")

    traceback = tab.text("pre.traceback")
    assert "Traceback (most recent call last)" in traceback
    assert "the order needs state.fixed (retry with a patch)" in traceback
    tab.shot("dead-lettered-session")

    tab.page.fill(
        "#retry-form textarea[name=patch]", '[{"op": "add", "path": "/fixed", "value": "by Ada"}]'
    )
    tab.page.fill("#retry-form input[name=reason]", "patched the order")
    tab.page.click("#retry-form button")
    assert "dead letter was retried" in tab.text("#notice")

    deadline = time.monotonic() + 20
    while "completed" not in tab.text("#status"):
        assert time.monotonic() < deadline, "the retried session did not complete"
        tab.page.wait_for_timeout(200)
        tab.page.reload()
    assert '"fixed": "by Ada"' in tab.text("#io")
    timeline = tab.text("#timeline")
    assert "dead_letter_retried" in timeline and "console:Ada" in timeline
    assert "session_completed" in timeline
    tab.shot("session")
    assert client.get(broken).result["fixed"] == "by Ada"
    assert not tab.dialogs
    assert tab.errors == []  # no page asked for something it may not have (a favicon)


def _dry_run_a_group_then_a_selection(
    tab: Tab, fixable: list[uuid.UUID], refused: uuid.UUID
) -> None:
    """Issue 41: alike failures are one group each, largest first, each with
    its own dry run; and a selection ticked row by row is drained alone."""
    groups = tab.page.locator("#groups tr.group")
    assert groups.count() == 2
    first = groups.nth(0)
    assert "console_fixable" in first.inner_text() and "PermanentError" in first.inner_text()
    assert first.locator("td.count").inner_text() == "2"
    assert groups.nth(1).locator("td.count").inner_text() == "1"
    tab.shot("dead-letter-groups")
    first.locator("button:has-text('Dry run')").click()
    tab.page.wait_for_url("**/ui/dead-letters/drain?**")
    assert tab.text("#matched") == "2 matched"  # the group alone
    assert tab.text("#would-act") == "2 would be retried"
    # A selection ticked row by row: its dry run is about those alone.
    tab.go("/ui/dead-letters")
    tab.page.locator(f"#dead-letters tr:has-text('{fixable[0]}') input[name=pick]").check()
    tab.page.locator(f"#dead-letters tr:has-text('{refused}') input[name=pick]").check()
    tab.page.click("#selection button")
    tab.page.wait_for_url("**/ui/dead-letters/drain?**")
    assert tab.text("#matched") == "2 matched"
    assert tab.text("#would-act") == "1 would be retried"
    assert tab.text("#refused") == "1 would be refused"


def test_a_drain_shows_its_dry_run_then_runs_with_progress(
    tab: Tab, client: Client, tmp_path: Path
) -> None:
    flag = tmp_path / "fixed"
    fixable = [client.start("console_fixable", {"flag": str(flag)}) for _ in range(2)]
    refused = client.start("console_compensated", {})
    wait_until(_failed(client, *fixable, refused), what="three dead letters")
    flag.touch()  # from now on a retry of the fixable sessions succeeds

    tab.go("/ui/dead-letters")
    tab.log_in()
    assert tab.page.locator("#dead-letters tbody tr").count() == 3
    _dry_run_a_group_then_a_selection(tab, fixable, refused)
    tab.go("/ui/dead-letters")

    tab.page.select_option("#drain select[name=action]", "retry")
    tab.page.click("#drain button:has-text('Dry run')")
    tab.page.wait_for_url("**/ui/dead-letters/drain?**")
    assert tab.text("#matched") == "3 matched"
    assert tab.text("#would-act") == "2 would be retried"
    assert tab.text("#refused") == "1 would be refused"
    refused_row = tab.text("#preview tr.refused")
    assert str(refused) in refused_row and "compensations ran" in refused_row
    tab.shot("drain-dry-run")
    assert all(client.get(s).status == "failed" for s in [*fixable, refused])  # a dry run

    tab.page.click("#run-drain button")
    tab.page.wait_for_url("**/ui/drains/**")
    tab.page.wait_for_selector("#drain-progress[data-running=no]")
    # The one the dry run said would be refused is refused, for the same reason.
    assert tab.text("#done-count") == "2" and tab.text("#failed-count") == "1"
    assert "compensations ran" in tab.text("#drain-progress ul.failed")
    tab.shot("drain-finished")
    wait_until(
        lambda: all(client.get(s).status == "completed" for s in fixable),
        what="the drained sessions to complete",
    )
    assert client.get(refused).status == "failed"
    # The finished drain links the sessions it touched, with their status now.
    tab.page.reload()
    touched = tab.page.locator("#touched tr.touched")
    assert touched.count() == 3
    rows = {row.split("\t")[1]: row for row in touched.all_inner_texts()}
    assert all("retried" in rows[str(s)] and "completed" in rows[str(s)] for s in fixable), rows
    assert "compensations ran" in rows[str(refused)] and "failed" in rows[str(refused)]
    assert tab.page.locator("#failed-again").count() == 0


def test_hostile_strings_from_agents_tools_and_errors_render_inert(
    tab: Tab, client: Client
) -> None:
    session = client.start("console_hostile", {"note": SCRIPT})
    wait_until(_failed(client, session), what="the hostile session to fail")
    tab.go("/ui/sessions")
    tab.log_in()
    for path in (
        f"/ui/sessions/{session}",
        "/ui/sessions?status=failed",
        "/ui/dead-letters",
        "/ui/dead-letters/drain?action=retry",
    ):
        tab.go(path)
        page = tab.page
        # Nothing ran and nothing was injected: no dialog, no image, no script
        # but the console's own, no javascript: link.
        assert page.locator("img").count() == 0, path
        assert page.locator("script").count() == 1, path
        assert page.locator("script").get_attribute("src") == "/ui/static/console.js"
        assert page.locator("a[href^='javascript']").count() == 0, path
        assert page.locator("[onerror]").count() == 0, path
        tab.shot(path.strip("/").replace("/", "_").replace("?", "_")[:60])
    # The session page shows every value as text, literally.
    tab.go(f"/ui/sessions/{session}")
    body = tab.text("body")
    for value in (SCRIPT, IMAGE.replace('"', '\\"'), JAVASCRIPT_URL, "Zoë ✓ 東京 🚀"):
        assert value in body, value
    assert "\\u202egnp.exe" in body  # the right-to-left override is shown, not obeyed
    assert LONG in body  # 100 KB, whole
    error = tab.text(".dead-letter .error-message")
    assert SCRIPT in error and IMAGE in error and JAVASCRIPT_URL in error
    assert SCRIPT in tab.text("#tool-calls")
    # An http(s) URL an agent stored is a link (without a referrer); javascript: is text.
    link = tab.page.locator(f"a[href='{HTTP_URL}']").first
    assert link.get_attribute("rel") == "noopener noreferrer nofollow"
    assert (
        tab.page.locator("pre.json a").count() == tab.page.locator(f"a[href='{HTTP_URL}']").count()
    )
    assert not tab.dialogs, tab.dialogs


def _waiting_session_page(tab: Tab, client: Client) -> uuid.UUID:
    """A session waiting for a signal, its page open and logged in to."""
    session = client.start("console_waiting", {})
    wait_until(lambda: client.get(session).status == "suspended", what="the session to wait")
    tab.go(f"/ui/sessions/{session}")
    tab.log_in()
    tab.page.wait_for_url(f"**/ui/sessions/{session}")
    return session


def test_an_action_without_the_csrf_token_is_refused_and_changes_nothing(
    tab: Tab, client: Client, db: Database
) -> None:
    session = _waiting_session_page(tab, client)

    tab.page.evaluate("document.querySelector('#cancel-form input[name=csrf]').remove()")
    with tab.page.expect_response(f"**/ui/sessions/{session}/cancel") as answer:
        tab.page.click("#cancel-form button")
    assert answer.value.status == 403
    assert "CSRF" in tab.text("h1") and "Nothing was changed" in tab.text("main")
    tab.shot("csrf-refused")
    assert client.get(session).status == "suspended"

    # Another site's page that posts to the console: the SameSite=Strict cookie
    # stays home, so the browser is sent to log in, and nothing changes.
    attacker = "http://attacker.test/"
    form = (
        f"<form id=f method=post action='{tab.base}/ui/sessions/{session}/cancel'>"
        "<input name=reason value=forged></form><script>f.submit()</script>"
    )
    tab.page.route(attacker, lambda route: route.fulfill(content_type="text/html", body=form))
    tab.page.goto(attacker)
    tab.page.wait_for_url("**/ui/login?**")
    assert client.get(session).status == "suspended"
    types = [e.type for e in client.events(session)]
    assert "session_cancelled" not in types

    # With the token, the same form does cancel (so the refusals were the token's).
    tab.go(f"/ui/sessions/{session}")
    tab.page.click("#cancel-form button")
    assert "cancelled" in tab.text("#notice")
    assert client.get(session).status == "cancelled"
    assert not tab.dialogs


def test_an_operator_changes_a_sessions_priority_from_its_page(
    tab: Tab, client: Client, db: Database
) -> None:
    session = _waiting_session_page(tab, client)
    assert tab.text("#priority") == "normal"
    tab.page.select_option("#priority-form select[name=priority]", "high")
    tab.page.fill("#priority-form input[name=reason]", "customer on the phone")
    tab.page.click("#priority-form button")
    assert "priority was changed" in tab.text("#notice")
    assert tab.text("#priority") == "high"
    assert client.get(session).priority == "high"
    [event] = [e for e in client.events(session) if e.type == "priority_changed"]
    assert event.payload["reason"] == "customer on the phone"
    assert event.payload["by"].startswith("console:")
    assert not tab.dialogs


def test_accepting_a_blocked_session_shows_what_runs_again_and_confirms_it(
    tab: Tab, client: Client, db: Database, deployment: LocalDeployment
) -> None:
    """Issue 41: the accept button leads to what accepting does (the booking
    that runs again, with its new nights and key; the recorded one, which
    stays); a confirmation that no longer names the recorded call is refused
    and changes nothing; the page's own confirmation accepts, and the new
    booking is made once."""
    with FakeAPI() as api:
        v1 = deployment.worker("tests.deploy_agents_v1")
        session = client.start("trip", {"api": api.url, "payments_down": True})
        wait_until(
            lambda: api.total_calls() == 1 and client.get(session).status == "retrying",
            what="the hotel booked, the step retrying",
        )
        v1.stop()
        deployment.worker("tests.deploy_agents_v2")  # books 3 nights instead of 2
        wait_until(lambda: client.get(session).status == "blocked", what="blocked")
        [recorded_key] = api.calls
        new_key = client.preview_accept(session).new_calls[0].idempotency_key
        assert new_key

        tab.go(f"/ui/sessions/{session}")
        tab.log_in()
        tab.page.wait_for_url(f"**/ui/sessions/{session}")
        tab.page.click("#accept-form button")
        tab.page.wait_for_url(f"**/ui/sessions/{session}/accept**")
        again = tab.text("#new-calls")
        assert "hotel #0" in again and "args[1].nights: 2 → 3" in again and new_key in again
        stays = tab.text("#effects")
        assert recorded_key in stays and "completed" in stays and '"nights": 2' in stays
        assert "changed from `2` to `3` in call `hotel` #0" in tab.text("#summary")
        assert "hotel #0 again" in tab.text("#accept-confirm button")
        tab.shot("accept-preview")
        assert client.get(session).status == "blocked"  # reading it changed nothing

        # A confirmation that does not name the recorded call: refused, unchanged.
        tab.page.fill("#accept-confirm input[name=reason]", "3 nights is right")
        tab.page.evaluate(
            "document.querySelector('#accept-confirm input[name=confirm]').value = 'rsm_other'"
        )
        with tab.page.expect_response(f"**/ui/sessions/{session}/accept") as answer:
            tab.page.click("#accept-confirm button")
        assert answer.value.status == 409
        assert "does not name exactly" in tab.text("#error")
        assert recorded_key in tab.text("#effects")  # the preview again, to confirm from
        assert tab.page.input_value("#accept-confirm input[name=reason]") == "3 nights is right"
        assert client.get(session).status == "blocked" and api.total_calls() == 1
        assert "divergence_accepted" not in [e.type for e in client.events(session)]

        tab.page.click("#accept-confirm button")
        tab.page.wait_for_url(f"**/ui/sessions/{session}?done=blocked_accepted")
        assert "accepted" in tab.text("#notice")
        wait_until(lambda: client.get(session).status == "completed", what="completed")
        assert [body["nights"] for _, body in api.order] == [2, 3]
        assert dict(api.calls) == {recorded_key: 1, new_key: 1}
        [accepted] = [e for e in client.events(session) if e.type == "divergence_accepted"]
        assert accepted.payload["by"] == "console:Ada"
        assert not tab.dialogs


def test_a_session_page_says_what_it_waits_for_links_parent_and_children_and_follows_it_live(
    tab: Tab, client: Client
) -> None:
    """Issue 41: a parent's page said 'Next step: gathered' and nothing of its
    children; a waiting child's said nothing of its signal above the forms;
    and neither changed until the operator reloaded."""
    parent = client.start("console_family", {})
    wait_until(
        lambda: (
            client.get(parent).status == "suspended"
            and len(client.page_sessions(parent=parent).items) == 2
            and all(c.status == "suspended" for c in client.page_sessions(parent=parent).items)
        ),
        what="a parent waiting for its two waiting children",
    )
    children = sorted(str(c.session_id) for c in client.page_sessions(parent=parent).items)

    # Found by a value in its input (the children's inputs are {"n": 0} and {"n": 1}).
    tab.go("/ui/sessions")
    tab.log_in()
    tab.page.wait_for_url("**/ui/sessions")
    tab.page.fill("#session-filters input[name=path]", "n")
    tab.page.fill("#session-filters input[name=value]", "1")
    tab.page.click("#session-filters button")
    tab.page.wait_for_url("**/ui/sessions?**")
    found = tab.page.locator("#sessions a[href^='/ui/sessions/']").all_inner_texts()
    [second] = [str(c.session_id) for c in client.page_sessions(parent=parent).items
                if c.input == {"n": 1}]  # fmt: skip
    assert [text[:8] for text in found] == [second[:8]], found

    tab.go(f"/ui/sessions/{parent}")
    assert tab.text("#now-text") == "waiting for 2 of its children to finish"
    listed = tab.page.locator("#children tr.child a")
    assert sorted(listed.all_inner_texts()) == children
    tab.shot("parent")

    # A child's page: what it waits for, in words, and the way back up.
    tab.page.click(f"#children a:has-text('{children[0]}')")
    tab.page.wait_for_url(f"**/ui/sessions/{children[0]}")
    assert tab.text("#now-text") == "waiting for signal `approve`"
    assert tab.text("#parent") == str(parent)

    # Left alone, the live page follows the session: the child is signalled
    # behind the operator's back, and the page shows it without a click.
    client.signal(uuid.UUID(children[0]), "approve", {"ok": True})
    expect(tab.page.locator("#now-text")).to_have_text(re.compile(r"^completed"), timeout=30_000)
    assert tab.page.locator("#live").count() == 0  # finished: no more reloads
    # The run at a glance: each step with its own time, the wait between.
    labels = tab.page.locator("#waterfall tbody td:first-child").all_inner_texts()
    assert labels == ["step hold", "wait, ended by signal", "step approved"], labels
    took = tab.page.locator("#waterfall tbody td.took").all_inner_texts()
    assert took[0].endswith(" ms") and took[2].endswith(" ms"), took
    # Payloads are one click away, not inline.
    assert tab.page.locator("details.payload").count() >= 3
    assert tab.page.locator("details.payload[open]").count() == 0
    tab.shot("child-completed")
    assert not tab.dialogs and not tab.errors


def test_the_workers_page_lists_the_live_worker_its_agents_and_what_no_worker_serves(
    tab: Tab, client: Client, db: Database
) -> None:
    orphan = client.start("console_undeployed", {})  # no worker loads this agent
    with db.connection() as conn:  # an hour of the scheduler's samples, one a minute
        conn.execute(
            "INSERT INTO activity_samples SELECT date_trunc('minute', now())"
            " - make_interval(mins => m), m % 5, 1, 40 + m % 3, 0, 0, 10000 - 25 * m + 5 * (m % 2),"
            " 100 - m / 10, 0, 30, 4 + m % 4, 9 + m % 5 FROM generate_series(0, 59) AS m"
        )
    tab.go("/ui/workers")
    tab.log_in()
    tab.page.wait_for_url("**/ui/workers")
    rows = tab.page.locator("#workers tr.worker.live")
    assert rows.count() == 1, tab.text()
    row = rows.nth(0).inner_text()
    assert "console_waiting" in row and "console_family" in row and "live" in row
    assert "1 live worker process" in tab.text("#worker-summary")
    assert "console_undeployed" in tab.text("#unserved")
    assert tab.page.title() == "Workers · resumable"
    assert tab.page.locator("#charts-hour polyline").count() == 5
    assert tab.page.locator("#charts-day polyline").count() == 5
    tab.shot("workers")
    client.cancel(orphan, actor="test", reason="test over")
    assert not tab.dialogs and not tab.errors


def test_an_operator_pauses_runs_resumes_and_deletes_a_schedule(
    tab: Tab, client: Client, db: Database
) -> None:
    from resumable import Schedule

    wait_until(lambda: _announced(db, "console_waiting"), what="the worker's agents")
    client.create_schedule(
        Schedule("nightly-review", "console_waiting", cron="30 2 * * *", timezone="Europe/Berlin")
    )
    tab.go("/ui/schedules")
    tab.log_in()
    tab.page.wait_for_url("**/ui/schedules")
    row = tab.page.locator("#schedule-nightly-review")
    assert "At 02:30 every day (Europe/Berlin)" in row.inner_text()
    assert "active" in row.inner_text()

    row.locator("input[name=reason]").fill("release freeze")
    row.locator("button:has-text('Pause')").click()
    assert "starts nothing until resumed" in tab.text("#notice")
    row = tab.page.locator("#schedule-nightly-review")
    assert "paused" in row.inner_text() and "release freeze" in row.inner_text()
    assert "by console:Ada" in row.inner_text()
    tab.shot("schedules-paused")

    row.locator("button:has-text('Run now')").click()
    tab.page.wait_for_url("**/ui/sessions/*")
    session_id = uuid.UUID(tab.page.url.rsplit("/", 1)[1].split("?")[0])
    assert client.get(session_id).agent == "console_waiting"
    wait_until(lambda: client.get(session_id).status == "suspended", what="the run to wait")

    tab.go("/ui/schedules")
    row = tab.page.locator("#schedule-nightly-review")
    assert str(session_id)[:8] in row.inner_text()
    row.locator("button:has-text('Resume')").click()
    assert "starts sessions again" in tab.text("#notice")
    assert not client.schedule("nightly-review").paused

    # Delete needs its box ticked (the browser refuses the form without it).
    row = tab.page.locator("#schedule-nightly-review")
    row.locator("button:has-text('Delete')").click()
    assert client.schedule("nightly-review").name == "nightly-review"
    row.locator("input[name=sure]").check()
    row.locator("button:has-text('Delete')").click()
    assert "Its sessions go on" in tab.text("#notice")
    assert "No schedules yet" in tab.text("#schedules")
    assert client.get(session_id).status == "suspended"
    assert tab.dialogs == [] and tab.errors == []


def _announced(db: Database, agent: str) -> bool:
    with db.connection() as conn:
        return conn.execute("SELECT 1 FROM agents WHERE name = %s", (agent,)).fetchone() is not None
