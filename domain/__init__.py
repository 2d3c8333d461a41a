"""The domain of healthledger: event-sourced aggregates and the use cases that drive them.

Nothing in here touches HTTP, SQL, the scheduler or the network: it imports the
`eventsourcing` domain and application layers, pydantic and the standard library.
"""
