"""The customer-side mirror: what the embedded webhook receiver builds from the messages it
takes. A context of its own: it shares no aggregate with the service.
"""
