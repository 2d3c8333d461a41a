"""Webhooks out: endpoints, deliveries, the public event types, what each event announces,
redelivery and the deprecation calendar.
"""
