"""Terminal mode's parts: Markdown blocks, event rendering, slash commands (see README.md)."""
