"""The webhook receiver's migration line: the mirror's tables, versions in
`healthledger_mirror_alembic_version`."""
