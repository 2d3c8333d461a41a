"""The event store: the recorder on our SQLAlchemy database, and eventsourcing's plumbing
configured for the ledger.
"""
