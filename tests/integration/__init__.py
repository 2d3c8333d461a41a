"""Integration tests: the service on real SQLite files and PostgreSQL, through its use
cases and its ASGI apps."""
