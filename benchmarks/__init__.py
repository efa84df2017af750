"""The headline benchmarks, one script each (``.venv/bin/python benchmarks/NAME.py``),
on a shared harness (``harness/``) with the agents their workers run (``agents/``).
docs/performance.md lists what each measures and its latest figures, and keeps the
conclusions of the finished studies whose scripts were deleted."""
