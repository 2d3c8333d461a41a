"""Checks of what is stored: the read models against the log, the daily integrity check
(the chain, its signed heads and the head file, and the read models)."""
