"""Delivering operator alerts: dead letters and failed compensations.

Alerts are written to an outbox table in the same transaction as the dead
letter they report, so none is lost when a process dies; the scheduler POSTs
them to ``RESUMABLE_ALERT_WEBHOOK_URL``, signed the Standard Webhooks way
(``webhook-id`` is stable per alert so a receiver can dedupe), retrying with
backoff until ``alert_max_attempts``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import httpx
from standardwebhooks.webhooks import Webhook

from resumable._internal import serialization
from resumable.models import alert_queries
from resumable.models.alert_queries import DueAlert
from resumable.models.database import Database
from resumable.settings import Settings

logger = logging.getLogger(__name__)


def _backoff(attempts: int) -> float:
    return float(min(300, 2 ** min(attempts, 9)))


class AlertSender:
    def __init__(self, settings: Settings, db: Database, timeout: float = 5.0) -> None:
        self.settings = settings
        self.db = db
        self.timeout = timeout
        secret = settings.alert_webhook_secret
        self._signer = Webhook(secret) if secret else None

    def deliver_due(self, limit: int = 20) -> int:
        """POST the alerts that are due; return how many were delivered."""
        url = self.settings.alert_webhook_url
        if not url:
            return 0
        with self.db.connection() as conn:
            due = alert_queries.take_due_alerts(conn, limit=limit)
        sent = 0
        if not due:
            return 0
        with httpx.Client(timeout=self.timeout) as http:
            for alert in due:
                sent += self._deliver(http, url, alert)
        return sent

    def _deliver(self, http: httpx.Client, url: str, alert: DueAlert) -> int:
        body = serialization.dumps(
            {
                "type": f"resumable.{alert.kind}",
                "alert_id": alert.id,
                "created_at": alert.created_at.isoformat(),
                "data": alert.payload,
            }
        )
        message_id = f"alert_{alert.id}"
        headers = {"content-type": "application/json", "webhook-id": message_id}
        if self._signer is not None:
            now = datetime.now(UTC)
            headers["webhook-timestamp"] = str(int(now.timestamp()))
            headers["webhook-signature"] = self._signer.sign(message_id, now, body)
        try:
            answer = http.post(url, content=body, headers=headers)
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            attempts = alert.attempts
            give_up = attempts >= self.settings.alert_max_attempts
            with self.db.connection() as conn:
                alert_queries.alert_failed(
                    conn, alert.id, give_up=give_up, error=str(exc)[:500], delay=_backoff(attempts)
                )
            log = logger.error if give_up else logger.warning
            log(
                "alert %s not delivered (attempt %d): %s%s",
                alert.id,
                attempts,
                exc,
                "; giving up" if give_up else "",
                extra={"action": "alert_failed", "alert": json.dumps(alert.payload)},
            )
            return 0
        with self.db.connection() as conn:
            alert_queries.alert_sent(conn, alert.id)
        return 1


def sync_lingering(settings: Settings, db: Database) -> dict[str, int]:
    """Open a condition (and its alert) for each session newly lingering past
    its threshold, resolve (and alert) those that cleared; how many of each.

    The thresholds are ``RESUMABLE_ALERT_{OVERDUE,UNSERVED,HUNG,BLOCKED}_SECONDS``.
    Conditions are tracked even without an alert webhook (the
    ``resumable_sessions_lingering`` gauge counts the open ones); alerts are
    written only when one is configured."""
    with db.connection() as conn:
        changed = alert_queries.sync_lingering(
            conn,
            overdue=settings.alert_overdue_seconds,
            unserved=settings.alert_unserved_seconds,
            hung=settings.alert_hung_seconds,
            blocked=settings.alert_blocked_seconds,
            alerts_enabled=settings.alert_webhook_url is not None,
        )
    counts: dict[str, int] = {}
    for row in changed:
        kind = row.kind
        counts[kind] = counts.get(kind, 0) + 1
        resolved = kind.endswith("_resolved")
        (logger.info if resolved else logger.warning)(
            "session %s (agent %s) %s: %s",
            row.session_id,
            row.agent,
            "no longer lingers" if resolved else "lingers",
            row.condition,
            extra={
                "action": kind,
                "session_id": str(row.session_id),
                "agent": row.agent,
                "condition": row.condition,
            },
        )
    return counts
