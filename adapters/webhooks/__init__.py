"""Webhooks out: signing (and, to come, the dispatcher that delivers); webhooks in: the
receiver that customers embed (verify, read, apply once to a local mirror)."""
