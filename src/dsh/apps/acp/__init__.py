"""``dsh acp``: the Agent Client Protocol front end (see README.md)."""
