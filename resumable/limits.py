"""Flow control: how many sessions of a kind run at once (``Concurrency``),
and how fast their calls to a provider go (``RateLimit``).

``Agent("support", concurrency=Concurrency(limit=2, key="tenant"))`` lets
at most two sessions of the agent *run* at once for each value of
``input["tenant"]``; with no ``key``, two for the whole agent. A slot is
held while a worker runs the session (from its claim until it suspends,
finishes, fails, yields or is handed back), not while it waits: a session
suspended for three days for an approval holds no slot.

A session over its key's limit waits without a worker and without a queue
message: it stays ``pending`` and the claim marks it *waiting for a slot*.
When a run of the same key ends, its worker wakes the oldest waiters (as many
as there are free slots), so a key's sessions start in the order they came
to wait; a slot whose worker died frees when its lease (or its heartbeat)
runs out, and the scheduler then wakes the waiters. Keys are independent:
one tenant's ten thousand sessions wait in their own line and never take a
slot from another tenant.

Why the claim, not the start: the limit belongs to the agent's code, which
only workers load (a web process or a client starting sessions may know
nothing of it), and the same rule then covers every way a session becomes
runnable: a start, a callback, a timer, a retry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from resumable.errors import AgentDefinitionError

# The largest limit (a slot count is an int4 in the database).
MAX_CONCURRENCY_LIMIT = 1_000_000
# The deepest key path into a session's input.
MAX_KEY_DEPTH = 8


@dataclass(frozen=True)
class Concurrency:
    """At most `limit` running sessions per value of `key`.

    `key` names a field of the session's input (``"tenant"``), or a path to
    one (``("customer", "id")``: objects by field, lists by position);
    None: one limit for the whole agent. An input that lacks the field
    counts under the key's missing value, shared by all such sessions. The
    value is compared as text: ``7`` and ``"7"`` are the same key."""

    limit: int
    key: str | Sequence[str] | None = None

    def __post_init__(self) -> None:
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise AgentDefinitionError(
                f"concurrency limit must be an int, got {type(limit).__name__}"
            )
        if not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
            raise AgentDefinitionError(
                f"concurrency limit must be between 1 and {MAX_CONCURRENCY_LIMIT:,}, got {limit}"
            )
        object.__setattr__(self, "key", _checked_path(self.key))

    @property
    def path(self) -> tuple[str, ...]:
        """The key's path into the input; empty: the agent as a whole."""
        key = self.key
        assert key is None or isinstance(key, tuple)
        return () if key is None else key

    def spec(self) -> dict[str, Any]:
        """As the claim reads it: ``{"limit": n, "key": [field, ...]}``."""
        return {"limit": self.limit, "key": list(self.path)}

    def describe(self) -> str:
        """One line for an operator: "2 at a time per input.tenant"."""
        per = "for the agent" if not self.path else "per input." + ".".join(self.path)
        return f"{self.limit} at a time {per}"


def _checked_path(key: object) -> tuple[str, ...] | None:
    if key is None:
        return None
    path: tuple[object, ...] = (key,) if isinstance(key, str) else tuple(_sequence(key))
    if not path or len(path) > MAX_KEY_DEPTH:
        raise AgentDefinitionError(
            f"a concurrency key is a field name or a path of 1 to {MAX_KEY_DEPTH} field names"
        )
    for part in path:
        if not isinstance(part, str) or not part or len(part) > 200 or not _storable(part):
            raise AgentDefinitionError(
                f"concurrency key parts must be non-empty field names, got {part!r}"
            )
    return tuple(str(part) for part in path)


def _storable(text: str) -> bool:
    """No NUL and no lone surrogate: PostgreSQL's text and JSON hold neither."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _sequence(key: object) -> Sequence[object]:
    if isinstance(key, Sequence) and not isinstance(key, bytes | bytearray):
        return key
    raise AgentDefinitionError(
        f"a concurrency key is a field name or a sequence of field names, got {key!r}"
    )


# The longest period or in-place wait a rate limit takes (a day): longer is a
# schedule, not a rate.
MAX_RATE_SECONDS = 86_400.0
# The most requests or tokens per period.
MAX_RATE_AMOUNT = 1_000_000_000
# Turns are kept to the microsecond: a closer spacing would be no limit at all.
MAX_REQUESTS_PER_SECOND = 1_000_000


@dataclass(frozen=True)
class RateLimit:
    """A named limit on calls, shared by every worker process of a deployment:
    at most `requests` calls start per `per` seconds, and, with `tokens`, the
    cost the calls report (an LLM's tokens: ``cost`` reads it from a call's
    result) stays within `tokens` per `per` seconds.

    Tokens are reserved as a call starts, at `estimate` (None: the average
    of what its calls reported so far, nothing before the first report), and
    corrected by what the call reports, so calls in flight together do not
    spend the same tokens.

    Declare it on the agent (``Agent(..., rate_limits=[openai])``) and name it
    on the calls it governs: ``ctx.tool("chat", llm, prompt, rate_limit="openai")``.
    Calls are spaced evenly (``per / requests`` apart), with `burst` calls
    allowed at once after an idle spell: with ``burst=1`` (the default) no
    window of `per` seconds ever sees more than `requests` starts. A call
    over the limit waits for its turn in place when that turn is at most
    `wait_in_place` seconds away; further off, its session lets the worker go
    and is run again when capacity returns (its earlier calls replayed from
    their records, no attempt counted). A call that raises ``RateLimited``
    (the provider's HTTP 429, with its Retry-After) holds the whole limit back
    that long and is made again when its turn comes."""

    name: str
    requests: int | None = None
    per: float = 60.0
    tokens: int | None = None
    cost: Callable[[Any], float] | None = field(default=None, compare=False)
    burst: int = 1
    wait_in_place: float = 10.0
    estimate: float | None = None

    def __post_init__(self) -> None:
        name = self.name
        if (
            not isinstance(name, str)
            or not name
            or len(name) > 200
            or not _storable(name)
            or not name.isprintable()
        ):
            raise AgentDefinitionError(
                f"a rate limit's name is 1 to 200 printable characters, got {name!r}"
            )
        for label in ("requests", "tokens"):
            _check_amount(name, label, getattr(self, label))
        if self.requests is None and self.tokens is None:
            raise AgentDefinitionError(f"rate limit {name!r} needs requests=, tokens= or both")
        if self.tokens is not None and self.cost is None:
            raise AgentDefinitionError(
                f"rate limit {name!r} counts tokens: pass cost=, a function that "
                "reads a call's tokens from its result"
            )
        if self.cost is not None and not callable(self.cost):
            raise AgentDefinitionError(f"rate limit {name!r}: cost must be callable")
        estimate = self.estimate
        if estimate is not None and (
            isinstance(estimate, bool)
            or not isinstance(estimate, int | float)
            or not math.isfinite(estimate)
            or estimate < 0
            or (self.tokens is not None and estimate > self.tokens)
        ):
            raise AgentDefinitionError(
                f"rate limit {name!r}: estimate is the tokens one call is expected to cost,"
                f" from 0 to the limit's tokens, got {estimate!r}"
            )
        _check_seconds(name, "per", self.per, allow_zero=False)
        _check_seconds(name, "wait_in_place", self.wait_in_place, allow_zero=True)
        if self.requests is not None and self.requests / self.per > MAX_REQUESTS_PER_SECOND:
            raise AgentDefinitionError(
                f"rate limit {name!r}: at most {MAX_REQUESTS_PER_SECOND:,} requests a second "
                "(turns are kept to the microsecond)"
            )
        burst = self.burst
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise AgentDefinitionError(f"rate limit {name!r}: burst must be an int >= 1")
        if self.requests is not None and burst > self.requests:
            raise AgentDefinitionError(
                f"rate limit {name!r}: burst ({burst}) cannot exceed requests ({self.requests})"
            )

    @property
    def interval(self) -> float:
        """Seconds between two starts at the full rate (0: requests are not limited)."""
        return 0.0 if self.requests is None else self.per / self.requests

    @property
    def seconds_per_token(self) -> float:
        """Seconds of capacity one unit of cost uses (0: cost is not limited)."""
        return 0.0 if self.tokens is None else self.per / self.tokens

    def call_cost(self, result: Any) -> float:
        """The cost a call reports, from its result (0 when not counted or unreadable)."""
        if self.cost is None:
            return 0.0
        value = self.cost(result)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return 0.0
        number = float(value)
        return number if math.isfinite(number) and number > 0 else 0.0

    def describe(self) -> str:
        """One line for an operator: "60 requests and 90,000 tokens per 60 s"."""
        parts = []
        if self.requests is not None:
            parts.append(f"{self.requests:,} requests")
        if self.tokens is not None:
            parts.append(f"{self.tokens:,} tokens")
        return f"{' and '.join(parts)} per {self.per:g} s"


def _check_amount(name: str, label: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RATE_AMOUNT:
        raise AgentDefinitionError(
            f"rate limit {name!r}: {label} must be an int between 1 and {MAX_RATE_AMOUNT:,}"
        )


def _check_seconds(name: str, label: str, value: object, *, allow_zero: bool) -> None:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
        and value <= MAX_RATE_SECONDS
    )
    if not ok:
        least = "0" if allow_zero else "more than 0"
        raise AgentDefinitionError(
            f"rate limit {name!r}: {label} must be {least} and at most "
            f"{MAX_RATE_SECONDS:,.0f} seconds, got {value!r}"
        )
