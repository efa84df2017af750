"""The "run session X" message and how it travels: the message and the one
policy for sending it after a commit (``messages.py``), the Redis broker that
carries it (``redis.py``) and its consumer side (``consumer.py``)."""
