"""Adapters: one module or package per outside world (HTTP, persistence, CLI...)."""
