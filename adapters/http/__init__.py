"""The two HTTP APIs (FastAPI): the team API, and (later) the management API."""
