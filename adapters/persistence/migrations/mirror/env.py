"""Alembic's entry point for the mirror's line (run by Alembic, never imported)."""

from healthledger.adapters.persistence.engine.migrating import MIRROR, run_env
from healthledger.adapters.persistence.engine.mirror_schema import mirror_metadata

# The metadata is only what autogenerate compares a database with when a revision is
# written; what a revision creates is written out in the revision itself.
run_env(MIRROR, mirror_metadata)
