"""The README and the docs site cannot drift from the code they document: the
README keeps its shape (the two setup commands first, a short front door, a
quick-start agent that runs), every page is in the site's nav, and every
setting, command, option and route a page names exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from resumable.cli.main import main as cli
from resumable.cli.settings_reference import variable
from resumable.settings import Settings
from resumable.webhooks.app import ROUTES
from resumable.webhooks.openapi import openapi_document

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
# The README's size: a front door, not the reference (issue 37).
README_MAX_LINES = 350
QUICK_START_AGENT_MAX_LINES = 40


def pages() -> dict[str, str]:
    """README.md and every page of the site, by path from the repository root."""
    found = {"README.md": README}
    for path in sorted(DOCS.rglob("*.md")):
        found[str(path.relative_to(ROOT))] = path.read_text()
    return found


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Each fenced code block as (language, source), fences paired in order."""
    blocks: list[tuple[str, str]] = []
    language: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        fence = re.match(r"\s*```(\w*)", line)
        if fence and language is None:
            language, lines = fence[1], []
        elif fence:
            blocks.append((language or "", "".join(f"{kept}\n" for kept in lines)))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def python_blocks(text: str) -> list[str]:
    return [source for language, source in fenced_blocks(text) if language == "python"]


def without_blocks(text: str) -> str:
    """The prose of a page: its text outside fenced code blocks."""
    kept, inside = [], False
    for line in text.splitlines():
        if re.match(r"\s*```", line):
            inside = not inside
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def test_readme_starts_with_the_two_setup_commands() -> None:
    block = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block[0].endswith(".venv/bin/resumable demo")
    assert block[1].endswith(".venv/bin/python -m pytest")
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert block[1] in ci.splitlines()


def test_the_readme_is_a_front_door() -> None:
    assert len(README.splitlines()) <= README_MAX_LINES
    for heading in ("## What it is for", "## Quick start", "## Five concepts"):
        assert heading in README
    assert "## Processes and deployment" in README and "## Documentation" in README


def test_the_readme_quick_start_agent_is_short_valid_code() -> None:
    source = python_blocks(README.split("## Quick start", 1)[1])[0]
    assert len(source.splitlines()) <= QUICK_START_AGENT_MAX_LINES
    namespace: dict[str, object] = {}
    exec(compile(source, "README.md", "exec"), namespace)
    from resumable import Agent

    agent = namespace["greeter"]
    assert isinstance(agent, Agent)
    assert agent.step_names == ["draft", "ask_approval", "send"]


def test_the_quick_start_page_runs_the_readme_agent_and_client() -> None:
    """One agent for a newcomer: the page's blocks are the README's, so the
    integration test that runs the README's runs the page's."""
    readme = python_blocks(README)[:2]
    page = python_blocks((DOCS / "quickstart.md").read_text())
    assert page == readme


def nav_files() -> list[str]:
    """The pages mkdocs.yml's nav lists (`- Title: path.md` lines, after `nav:`)."""
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    return re.findall(r"^\s*- [^:]+: (\S+\.md)\s*$", nav, flags=re.MULTILINE)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    listed = nav_files()
    on_disk = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    assert sorted(listed) == on_disk
    assert len(set(listed)) == len(listed)


def test_every_docs_link_of_the_readme_is_a_page() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 20
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert missing == []
    # The docs map names every page but the site's home (the README is the repository's).
    assert {link.removeprefix("docs/") for link in links} == set(nav_files()) - {"index.md"}


# --- what a page names exists --------------------------------------------------


def _code_read_by_the_project() -> str:
    """Source that may read an environment variable the settings do not hold."""
    return "\n".join(
        path.read_text()
        for folder in ("resumable", "tests", "benchmarks")
        for path in (ROOT / folder).rglob("*.py")
    )


def test_every_variable_a_page_names_is_read_by_the_code() -> None:
    settings = {variable(name, info) for name, info in Settings.model_fields.items()}
    code = _code_read_by_the_project()
    unknown: set[str] = set()
    for page, text in pages().items():
        for match in re.finditer(r"RESUMABLE_[A-Z0-9_]*", text):
            name = match[0]
            if text[match.end() : match.end() + 1] == "*":  # RESUMABLE_ALERT_*_SECONDS
                if not any(setting.startswith(name) for setting in settings):
                    unknown.add(f"{page}: {name}*")
                continue
            name = name.rstrip("_")
            if name == "RESUMABLE":  # "the `RESUMABLE_` prefix"
                continue
            if name not in settings and not re.search(rf"\b{name}\b", code):
                unknown.add(f"{page}: {name}")
    assert sorted(unknown) == []


def _command_lines(text: str) -> list[str]:
    """Each `resumable ...` command a page shows, in code spans and code blocks."""
    text = text.replace("\\\n", " ")
    spans = [source for language, source in fenced_blocks(text) if language in ("bash", "")]
    prose = without_blocks(text)
    spans += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)]
    commands = []
    for span in spans:
        for line in span.splitlines():
            for found in re.finditer(r"(?:^|[\s($])(?:\.venv/bin/)?resumable (.*)", line):
                command = re.split(r"\s#|[;&)]|\|\s", found[1])[0]
                commands.append(command.strip())
    return commands


def _alternatives(token: str) -> list[str]:
    return [part for part in token.strip("[]").split("|") if part]


def _check_command(line: str) -> list[str]:
    """What in a command line names no command or option ([] when all is well)."""
    try:
        tokens = shlex.split(line)
    except ValueError:
        tokens = line.split()
    command: click.Command = cli
    problems: list[str] = []
    for token in tokens:
        names = _alternatives(token)
        if not names:
            continue
        if isinstance(command, click.Group) and not token.startswith("-"):
            if any(name.isupper() or name == "..." for name in names):
                return problems  # a placeholder: `resumable COMMAND --help`
            context = click.Context(command)
            missing = [name for name in names if command.get_command(context, name) is None]
            if missing:
                return [f"`resumable {line}`: no command {missing}"]
            if len(names) > 1:  # `shared show|history NAME`: each must take the rest
                return [p for name in names for p in _check_command(_replace(line, token, name))]
            found = command.get_command(context, names[0])
            assert found is not None
            command = found
            continue
        for name in names:
            if name.startswith("--"):
                option = name.split("=", 1)[0]
                known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
                if option not in known | {"--help"}:
                    problems.append(f"`resumable {line}`: {command.name} has no {option}")
    return problems


def _replace(line: str, token: str, name: str) -> str:
    return line.replace(token, name, 1)


def test_every_command_and_option_a_page_shows_exists() -> None:
    problems = []
    checked = 0
    for page, text in pages().items():
        for line in _command_lines(text):
            checked += 1
            problems += [f"{page}: {problem}" for problem in _check_command(line)]
    assert checked >= 100
    assert problems == []


def _route_key(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path.split("?", 1)[0]).rstrip(".,:;")


def test_every_route_a_page_names_exists() -> None:
    document = openapi_document(ROUTES)
    routes = {
        (method.upper(), _route_key(path))
        for path, methods in document["paths"].items()
        for method in methods
    }
    unknown = set()
    checked = 0
    for page, text in pages().items():
        # resumable's own routes (not an embedding shop's `POST /orders`).
        named = r"\b(GET|POST|PUT|PATCH|DELETE) (/(?:v1/|healthz|readyz|metrics|openapi)[^\s`,)]*)"
        for method, path in re.findall(named, text):
            *head, last = _route_key(path).split("/")
            for segment in last.split("|"):  # /resume|accept|fail
                checked += 1
                if (method, "/".join([*head, segment])) not in routes:
                    unknown.add(f"{page}: {method} {path}")
    assert checked >= 50
    assert sorted(unknown) == []
