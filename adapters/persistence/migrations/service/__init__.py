"""The service's migration line: its tables, versions in `alembic_version`."""
