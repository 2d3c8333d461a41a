"""Provider connections: linking, link tokens, pulls, resource feeds, the provider port and the
health data store port.
"""
