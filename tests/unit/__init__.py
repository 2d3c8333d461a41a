"""Unit tests: the domain on its own, no database, no network."""
