"""Drivers that act because time passed. APScheduler only wakes them up: what is due is
read from our own tables, and every command they call is idempotent."""
