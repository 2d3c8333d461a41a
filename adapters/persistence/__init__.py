"""Persistence on SQLAlchemy: one URL (SQLite file by default, PostgreSQL when it grows)."""
