"""The operator console: server-rendered pages over the same Python layer as
the API (``Client``, ``DeadLetters``, ``TimeTravel``, ``Inbox``), served by the
web process at ``/ui`` for browsers logged in with an API token.

``app.py`` builds it and routes ``/`` and ``/ui/...`` to it in front of the
API; ``auth.py`` (one level up) holds its public allow-list and its cookie
check; ``forms.py`` its CSRF check; ``render.py`` its escaping.
"""
