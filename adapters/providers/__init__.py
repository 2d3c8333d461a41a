"""Provider adapters behind the domain's provider port
(`healthledger.domain.connections.providers`).
"""
