"""The multi-host harness, run as a tool, not by pytest: ``python -m
tests.multihost [--short]`` (see ``__main__.py``). The fault matrix's workload
and checks (``tests/faults``) on six hosts made of network namespaces
(``network.py``, ``hosts.py``, ``servers.py``), through network partitions
(``partitions.py``). Nothing here is imported by the processes it starts, so
this ``__init__`` imports nothing."""
