"""The revisions, oldest first by their `down_revision` chain."""
