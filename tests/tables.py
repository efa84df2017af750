"""Every table the runtime writes (not the schema's version): what a test or
a fault run empties before it starts, one list for all of them."""

RUNTIME_TABLES = (
    "sessions",
    "checkpoints",
    "audit_events",
    "tool_execution_cache",
    "callbacks",
    "deliveries",
    "agents",
    "agent_versions",
    "workers",
    "dead_letters",
    "alerts",
    "archived_sessions",
    "finished_session_counts",
    "resting_session_counts",
    "session_conditions",
    "shared_documents",
    "shared_versions",
    "coordination_locks",
    "activity_samples",
    "schedules",
)
