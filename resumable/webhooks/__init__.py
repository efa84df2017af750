"""The HTTP side: a Starlette app for sessions, callbacks, signals and health."""
