"""Model-facing names of MCP tools: ``mcp__<serverName>__<rawName>``, normalised.

A public name is a pure function of ``(serverName, rawName)``: connection order, re-syncs and
other servers never change it. When the joined name already fits the function-name contract
(at most 64 characters of ``[A-Za-z0-9_-]``) it is used verbatim; otherwise invalid characters
become ``_``, the result is cut to 51 characters, and ``_`` plus the first 12 hex digits of
``sha256(serverName + "\\0" + rawName)`` is appended, so two distinct tools never collapse into
one name. The raw name is what goes over the wire.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

__all__ = ["MAX_PUBLIC_NAME_LENGTH", "SERVER_NAME_RE", "public_tool_name", "valid_server_name"]

MAX_PUBLIC_NAME_LENGTH: Final = 64
HASH_LENGTH: Final = 12
SERVER_NAME_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")
_INVALID: Final = re.compile(r"[^A-Za-z0-9_-]")
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def valid_server_name(name: str) -> bool:
    """Whether ``name`` may namespace a server's tools (``[A-Za-z0-9_-]{1,32}``)."""
    return SERVER_NAME_RE.fullmatch(name) is not None


def public_tool_name(server_name: str, raw_name: str) -> str:
    """The name the model sees for tool ``raw_name`` of server ``server_name``."""
    joined = f"mcp__{server_name}__{raw_name}"
    # As the reference replaces per UTF-16 unit, a character outside the BMP becomes "__".
    normalized = _INVALID.sub(lambda m: "__" if ord(m.group()) > 0xFFFF else "_", joined)
    if normalized == joined and len(normalized) <= MAX_PUBLIC_NAME_LENGTH:
        return normalized
    # A lone surrogate (possible in JSON text) hashes as U+FFFD, as a UTF-8 encoder must.
    identity = _LONE_SURROGATE.sub("\ufffd", f"{server_name}\0{raw_name}")
    digest = hashlib.sha256(identity.encode()).hexdigest()[:HASH_LENGTH]
    return f"{normalized[: MAX_PUBLIC_NAME_LENGTH - HASH_LENGTH - 1]}_{digest}"
