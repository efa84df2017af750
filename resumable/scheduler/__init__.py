"""The poller: wakes due timers, polls and timeouts, and reconciles."""
