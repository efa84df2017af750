"""What several processes share: the inbox (callbacks and signals), dead
letters, blocked sessions, time travel (history and forks), and the checks
of the arguments the client, the CLI and the web take."""
