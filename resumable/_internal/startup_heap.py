"""Long-running processes move what they built while starting out of the
garbage collector's way.

A web, worker or scheduler process imports starlette, pydantic, psycopg,
dramatiq, SQLAlchemy and more: a few hundred thousand tracked objects that
live as long as the process does. Python's full (generation 2) collection
walks every one of them, with the GIL held. In ``benchmarks/resume.py`` that
took 50-70 ms a time in the web process and in the workers, in the middle of
phase B: every request and step in flight waited for it.

``gc.freeze()`` moves the objects alive now into a permanent generation that
collections skip, so a full collection walks only what was allocated since.
Nothing is leaked by it: what is frozen is what the process keeps anyway
(modules, classes, the app and its pools), and cycles made later are still
collected. A host application that mounts the web app decides this for its
own process; only our commands call it. The count is logged at DEBUG.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)


def freeze_startup_heap() -> None:
    """Collect what starting up left behind, then freeze the rest."""
    gc.collect()
    gc.freeze()
    logger.debug(
        "start-up heap frozen: %d objects left out of full collections",
        gc.get_freeze_count(),
        extra={"action": "heap_frozen"},
    )
