"""The service's revisions, oldest first by `down_revision`."""
