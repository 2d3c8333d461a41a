"""The webhook receiver that customers embed, with its own tables and message contract (the
mirror's adapters).
"""
