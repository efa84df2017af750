"""The agents the benchmarks' worker subprocesses run (``RESUMABLE_AGENTS=benchmarks.agents.NAME``),
one module per script of the same name, and the fake LLM ``inflight.py``'s agents call
(``slow_llm.py``, a process of its own)."""
