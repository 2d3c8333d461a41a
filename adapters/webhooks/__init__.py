"""Webhooks out: signing (and, to come, the dispatcher that delivers)."""
