"""Workspace rewind: snapshots of the workspace in a private shadow git store, named by the
session log, and the diff, restore and fork operations on them (see README.md)."""

# Snapshots older than this are pruned by `dsh sessions gc` (here, so the CLI parser can name
# it without importing the store).
DEFAULT_RETENTION_DAYS = 30
