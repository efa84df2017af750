"""Example agents. Not part of the installed package: run them from the
repository root, where ``examples`` is importable (see examples/README.md)."""
