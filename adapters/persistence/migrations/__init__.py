"""Alembic script directories, one per migration line (see `migrating.py`): `service`
(the service's tables) and `mirror` (the webhook receiver's tables)."""
