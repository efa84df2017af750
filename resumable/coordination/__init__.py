"""Agents that work together: shared JSON documents updated atomically in the
step's own commit, fenced locks and semaphores that sessions wait for
durably. Each concept is one module here; their SQL is in
``resumable/models/coordination_queries.py``."""
