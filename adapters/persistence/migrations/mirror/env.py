"""Alembic's entry point for the mirror's line (run by Alembic, never imported)."""

from healthledger.adapters.mirror.schema import mirror_metadata
from healthledger.adapters.persistence.migrating import MIRROR, run_env

# The metadata is only what autogenerate compares a database with when a revision is
# written; what a revision creates is written out in the revision itself.
run_env(MIRROR, mirror_metadata)
