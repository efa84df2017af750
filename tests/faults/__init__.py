"""Crash tests run as a tool, not by pytest: a real deployment through faults,
its invariants (6, 10 and 11 of the design) checked from outside.

- ``python -m tests.faults [--short]``: the fault matrix CI runs (``.ci/run``):
  one workload (``agents.py``) through each fault in turn (``matrix.py``) on
  processes it replaces as the faults take them (``fleet.py``), with callbacks
  from an outside system (``callbacks.py``) and effects counted by an external
  ledger (``ledger.py``);
- ``python -m tests.faults.chaos``: every fault at once under a steady load,
  and the time a killed worker's session takes to run again (``chaos_agent.py``).

Both run on the benchmarks' harness (``benchmarks/harness``: servers, clients,
report lines). Nothing here is imported by the worker processes but the two
agent modules, so this package's ``__init__`` imports nothing.
"""
