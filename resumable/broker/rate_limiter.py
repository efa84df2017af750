"""Rate limits shared by every worker process: a turn for each call, in Redis.

Each named limit (``resumable/limits.py``) is one Redis hash, changed only by
the Lua script below, so every worker of a deployment takes its turns from
the same line, on the same clock (Redis's ``TIME``), in one round trip. The
line is the generic cell rate algorithm: ``tat`` is when the next call would
start were calls spaced exactly ``per / requests`` apart; a call may start
once ``tat - tolerance`` (``burst - 1`` spacings) has come. A call that can
start within the caller's wait takes its turn at once, in the future: its
start is reserved, ``tat`` moves one spacing on, and the caller sleeps until
then, so five hundred waiting calls start one spacing apart instead of
racing for each free moment. A turn further off reserves nothing; the
caller's session lets its worker go and asks again later. When it comes
back is its place in a second line, ``ftat``, of those that went away: one
spacing after the last one, so that they return one after the other, each
a little before its turn (``rate_turns.py``), rather than all at once when
the reserved turns run out.

Tokens are reserved as a call starts, at an estimate (the limit's, or the
average of what calls reported), and corrected when it reports its cost:
``ttat`` moves on by the tokens (``per / tokens`` a unit) and no call starts
before it, so calls in flight together cannot spend the same tokens. A
provider's refusal (``RateLimited``) moves both, and ``held`` (for a limit of
tokens alone), to its Retry-After, for every caller.

Redis holds nothing here that is not rebuilt by use: a hash expires one
period after its last turn, and a flushed or restarted Redis forgets the
line, which then starts afresh (at worst one burst early). Times are integer
microseconds (Lua's numbers are doubles: exact to 2**53).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from resumable.limits import RateLimit

# The set of limits in use, for the operators' view (a name whose hash has
# expired is dropped from it when it is listed).
_NAMES = "rate-limits"

_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local mode = ARGV[1]
local interval = tonumber(ARGV[2])
local tolerance = tonumber(ARGV[3])
local amount = tonumber(ARGV[4])
local per = tonumber(ARGV[5])
local spt = tonumber(ARGV[8])
local v = redis.call('HMGET', key, 'tat', 'ttat', 'held', 'ftat', 'avg')
local tat = math.max(tonumber(v[1]) or now, now)
local ttat = tonumber(v[2]) or now
local held = tonumber(v[3]) or 0
local ftat = math.max(tonumber(v[4]) or 0, tat)
local avg = tonumber(v[5])
local result = {1, 0, now, 0}
if mode == 'check' then
    return {1, math.max(held - now, 0), now, 0}
end
if mode == 'acquire' then
    local at = now
    if interval > 0 then at = math.max(at, tat - tolerance) end
    at = math.max(at, ttat, held)
    local wait = at - now
    if wait > amount then
        -- Too far to wait in place: a place in the line of those who come
        -- back later, one spacing after the last such place, so that they
        -- come back one after the other rather than all at once.
        if interval > 0 then
            wait = math.max(wait, ftat - tolerance - now)
            redis.call('HSET', key, 'ftat', ftat + interval)
        end
        return {0, wait, now, 0}
    end
    if interval > 0 then tat = math.max(tat, at) + interval end
    -- Tokens are reserved as the call starts, at its estimate (or the
    -- average of what calls reported), and corrected when it reports.
    local reserved = 0
    if spt > 0 then
        reserved = tonumber(ARGV[9])
        if reserved < 0 then reserved = avg or 0 end
        ttat = math.max(ttat, at) + reserved * spt
    end
    redis.call('HINCRBY', key, 'granted', 1)
    if wait > 0 then redis.call('HINCRBY', key, 'queued', 1) end
    result = {1, wait, now, math.floor(reserved * 1000)}
elseif mode == 'charge' then
    local actual, reserved = tonumber(ARGV[9]), tonumber(ARGV[10])
    if actual > reserved then
        -- A debt of at most one period (nor a nonsense one into an overflow).
        ttat = math.max(ttat, now) + math.min((actual - reserved) * spt, per * 1000)
    else
        ttat = math.max(ttat - (reserved - actual) * spt, now)
    end
    if avg then avg = avg * 0.8 + actual * 0.2 else avg = actual end
    redis.call('HSET', key, 'avg', avg)
elseif mode == 'hold' then
    local until_ = now + amount
    held = math.max(held, until_)
    if interval > 0 then tat = math.max(tat, until_) end
    ttat = math.max(ttat, until_)
    redis.call('HINCRBY', key, 'refused', 1)
end
redis.call('HSET', key, 'tat', tat, 'ttat', ttat, 'held', held,
           'interval', interval, 'tolerance', tolerance, 'params', ARGV[6])
local last = math.max(tat, ttat, held) - now
redis.call('PEXPIRE', key, math.floor(last / 1000) + per + 1000)
redis.call('SADD', KEYS[2], ARGV[7])
return result
"""

_MICROS = 1_000_000


@dataclass(frozen=True)
class Turn:
    """A call's turn: whether it is reserved, in how many seconds it comes,
    when, on Redis's clock (seconds since the epoch), and the tokens it
    reserved (its estimate; corrected by ``charge``)."""

    granted: bool
    wait: float
    at: float
    reserved: float = 0.0


@dataclass(frozen=True)
class LimitUsage:
    """One limit as the operators' view shows it."""

    name: str
    description: str
    #: Seconds until a new call could start (0: now).
    next_free_in: float
    #: Seconds of reserved turns ahead (calls waiting in place are among them).
    reserved_ahead: float
    #: Seconds the provider asked the limit to hold back for, still to run.
    held_for: float
    granted: int
    queued: int
    refused: int


def _key(namespace: str, queue: str, name: str) -> str:
    return f"{namespace}:{queue}:rate:{name}"


def _names_key(namespace: str, queue: str) -> str:
    return f"{namespace}:{queue}:{_NAMES}"


class RateLimiter:
    """The turns of one deployment's calls (its Redis and queue), for a worker."""

    def __init__(self, client: redis.Redis, namespace: str, queue: str) -> None:
        self._client = client
        self._namespace, self._queue = namespace, queue
        self._script = client.register_script(_SCRIPT)

    def turn(self, limit: RateLimit, max_wait: float) -> Turn:
        """Reserve the next turn of `limit` if it comes within `max_wait`
        seconds; else reserve nothing and say when it would come."""
        estimate = -1.0 if limit.estimate is None else limit.estimate
        granted, wait, now, reserved = self._run(limit, "acquire", max_wait, estimate)
        return Turn(bool(granted), wait / _MICROS, (now + wait) / _MICROS, reserved / 1000)

    def charge(self, limit: RateLimit, cost: float, reserved: float = 0.0) -> None:
        """A call of `limit` that reserved `reserved` tokens reported `cost`:
        later calls wait off the difference (or gain it back), a period's
        worth at most."""
        if limit.tokens is None:
            return
        cost = min(max(cost, 0.0), float(limit.tokens))
        self._run(limit, "charge", 0.0, cost, reserved)

    def hold_back(self, limit: RateLimit, seconds: float) -> None:
        """The provider refused a call: no call of `limit` starts for `seconds`."""
        self._run(limit, "hold", seconds)

    def held_for(self, limit: RateLimit) -> float:
        """Seconds a refusal still holds `limit` back (0: none): a call that
        slept until its reserved turn asks before it goes, since a refusal
        since then voids the turns reserved before it."""
        return self._run(limit, "check", 0.0)[1] / _MICROS

    def _run(
        self, limit: RateLimit, mode: str, seconds: float, tokens: float = 0.0, more: float = 0.0
    ) -> tuple[int, int, int, int]:
        """Run the script: (granted, wait, Redis's now) in microseconds, and
        the tokens reserved, in thousandths."""
        params = limit.describe()
        keys = [_key(self._namespace, self._queue, limit.name), self._names_key()]
        interval = round(limit.interval * _MICROS)
        args: list[str | int] = [
            mode,
            interval,
            interval * (limit.burst - 1),
            round(max(seconds, 0.0) * _MICROS),
            round(limit.per * 1000),
            params,
            limit.name,
            repr(limit.seconds_per_token * _MICROS),
            repr(float(tokens)),
            repr(float(more)),
        ]
        granted, wait, now, reserved = self._script(keys=keys, args=args)
        return int(granted), int(wait), int(now), int(reserved)

    def _names_key(self) -> str:
        return _names_key(self._namespace, self._queue)


def usage(client: redis.Redis, namespace: str, queue: str, top: int = 50) -> list[LimitUsage]:
    """The limits in use (their hash not yet expired), busiest first: those
    with the furthest next turn."""
    names_key = _names_key(namespace, queue)
    names = sorted(
        n.decode() if isinstance(n, bytes) else str(n) for n in client.smembers(names_key)
    )
    if not names:
        return []
    pipe = client.pipeline(transaction=False)
    pipe.time()
    for name in names:
        pipe.hgetall(_key(namespace, queue, name))
    now_parts, *hashes = pipe.execute()
    now = int(now_parts[0]) * _MICROS + int(now_parts[1])
    found: list[LimitUsage] = []
    gone: list[str] = []
    for name, fields in zip(names, hashes, strict=True):
        if not fields:
            gone.append(name)
            continue
        found.append(_usage(name, _decoded(fields), now))
    if gone:
        client.srem(names_key, *gone)
    found.sort(key=lambda u: (-u.next_free_in, -u.granted, u.name))
    return found[:top]


def _decoded(fields: dict[Any, Any]) -> dict[str, str]:
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    return {text(k): text(v) for k, v in fields.items()}


def _usage(name: str, fields: dict[str, str], now: int) -> LimitUsage:
    def number(field: str) -> float:
        try:
            return float(fields.get(field, "0"))
        except ValueError:
            return 0.0

    tat, ttat, held = number("tat"), number("ttat"), number("held")
    interval, tolerance = number("interval"), number("tolerance")
    next_free = float(now)
    if interval > 0:
        next_free = max(next_free, tat - tolerance)
    next_free = max(next_free, ttat, held)
    return LimitUsage(
        name=name,
        description=fields.get("params", ""),
        next_free_in=(next_free - now) / _MICROS,
        reserved_ahead=max(tat - now, 0) / _MICROS if interval > 0 else 0.0,
        held_for=max(held - now, 0) / _MICROS,
        granted=int(number("granted")),
        queued=int(number("queued")),
        refused=int(number("refused")),
    )
