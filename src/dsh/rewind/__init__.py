"""Workspace rewind: snapshots of the workspace in a private shadow git store, named by the
session log, and the diff, restore and fork operations on them (see README.md)."""
