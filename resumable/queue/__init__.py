"""Running sessions: the dramatiq broker, the session actor and the step loop."""
