"""Helpers no user imports: serialization and redaction, logs, tracing's
plumbing, /proc readers, stop signals, the home directory, the embedded
servers, reachability probes. Anything here may change without notice."""
