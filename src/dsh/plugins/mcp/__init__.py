"""MCP client: Model Context Protocol servers' tools as dsh tools (see README.md).

Kept import-light: the ``mcp`` SDK is imported by :mod:`.client` only when a server connects.
"""
