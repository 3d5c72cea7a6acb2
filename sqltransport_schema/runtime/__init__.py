"""Runtime: version-matched statements, send/receive API, message pump, wire format."""
