"""The aggregate query over a user's health data (endpoint 10, closed beta): the request
language (`query.py`), the tables and columns it names (`tables.py`), and the small
expression language of its `where` (`where.py`). What a query means is decided here; the
engine that runs it is an adapter (`adapters/answers/health_queries.py`, ADR 0018).
"""
