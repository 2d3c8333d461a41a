"""The mirror's revisions, oldest first by `down_revision`."""
