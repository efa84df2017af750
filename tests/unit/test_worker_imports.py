"""The worker's modules import each other without a circle, type hints included.

``lint-imports`` checks the same (the ``acyclic_siblings`` contract on
``resumable.queue`` in pyproject.toml), but its graph leaves out imports made
only for type checking (``exclude_type_checking_imports``), and that is how
the last circle hid: the step loop's continuation on the event loop imported
the runner under ``TYPE_CHECKING`` while the runner imported it.
"""

from __future__ import annotations

import grimp


def test_no_module_of_the_worker_imports_one_that_imports_it_back() -> None:
    graph = grimp.build_graph("resumable", exclude_type_checking_imports=False)
    assert graph.nominate_cycle_breakers("resumable.queue") == set()
