"""The refund agent that ``resumable demo`` runs, as an example to read and run.

The code lives in the installed package, in ``resumable/demo/agent.py``, so
that ``resumable demo`` works from any directory; this module re-exports it
for workers started from the repository root. Read it there: four steps and
a check, each side effect an idempotent ``ctx.tool`` call.

1. ``look_up_order``: GET the order from the shop's API (a recorded read).
2. ``ask_approval``: create a callback URL for a human and suspend on it.
3. ``issue_refund``: POST the refund with resumable's idempotency key, then
   wait for it to settle with a ``Poll`` on the ``refund_settled`` check.
4. ``finish``: complete with the refund id.

Run it by hand against your own shop API (one that serves ``GET
/orders/{id}``, ``POST /refunds`` and ``GET /refunds/{id}``)::

    python -m resumable.cli worker --agents examples.refund_agent
    python -m resumable.cli web
    python -m resumable.cli scheduler
    python -m resumable.cli enqueue demo-refund \\
        --input '{"order_id": "ord_1", "api": "http://127.0.0.1:9000"}'
    # the approval URL is in the session's state; without RESUMABLE_WEBHOOK_SECRET
    # set, its unguessable token is the only credential a POST needs:
    python -m resumable.cli sessions show SESSION_ID
    curl -X POST -H 'Content-Type: application/json' \\
        -d '{"approved": true, "by": "you"}' APPROVAL_URL
"""

from __future__ import annotations

from resumable.demo.agent import refund, refund_settled

__all__ = ["refund", "refund_settled"]
