"""Alembic's entry point for the service's line (run by Alembic, never imported)."""

from healthledger.adapters.persistence.engine.migrating import SERVICE, run_env
from healthledger.adapters.persistence.engine.schema import metadata

# The metadata is only what autogenerate compares a database with when a revision is
# written; what a revision creates is written out in the revision itself.
run_env(SERVICE, metadata)
