"""Credentials in URLs, removed before a URL is printed, logged or told to the model.

An endpoint URL can carry a secret: ``http://user:sk-x@host/v1`` (userinfo) or
``https://host/v1?api-key=sk-x`` (a query value). :func:`redact_url` replaces the userinfo with
``***`` and the value of every credential-like query or fragment parameter with ``***``;
:func:`redact_urls` does that to every URL inside a text (an error message, a log line). They are
the one redaction dsh uses wherever a URL leaves it: the openai-llm error text (so the stderr
line and ``turn/end.message``), the turn-outcome note the model reads, the adapter's ``repr``,
and every log line ``dsh`` writes to stderr.

A parameter is credential-like when its name, lower-cased with ``-`` and ``_`` removed,
contains ``key``, ``token``, ``secret``, ``sig``, ``pass``, ``pwd``, ``auth``, ``credential``,
``session`` or ``code``: ``api-key``, ``key``, ``token``, ``access_token``, ``sig``,
``X-Amz-Signature``, ``client_secret``, ``password``... Hiding a harmless value costs nothing;
showing a secret cannot be undone.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["REDACTED", "redact_url", "redact_urls"]

REDACTED: Final = "***"

_SECRET_NAME: Final = re.compile(r"key|token|secret|sig|pass|pwd|auth|credential|session|code")
# scheme://[userinfo@]rest; the URL ends at whitespace, a quote or an angle bracket.
_URL: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")


def _secret(name: str) -> bool:
    if "%" in name:
        from urllib.parse import unquote  # only here: every dsh command imports this module

        name = unquote(name)
    return _SECRET_NAME.search(name.lower().replace("-", "").replace("_", "")) is not None


def _params(text: str) -> str:
    parts = []
    for part in text.split("&"):
        name, eq, value = part.partition("=")
        parts.append(f"{name}={REDACTED}" if eq and value and _secret(name) else part)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """``url`` with its userinfo and credential-like parameter values replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # The authority ends at the first /, ? or #; userinfo is everything before its last @.
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = f"{REDACTED}@{authority.rpartition('@')[2]}"
    path, hash_, fragment = tail.partition("#")
    path, mark, query = path.partition("?")
    if mark:
        query = _params(query)
    if hash_:
        fragment = _params(fragment)
    return f"{scheme}://{authority}{path}{mark}{query}{hash_}{fragment}"


def redact_urls(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`)."""
    if "://" not in text:
        return text
    return _URL.sub(_one, text)


def _one(match: re.Match[str]) -> str:
    # Punctuation right after a URL ("<url>: cause", "(<url>)") belongs to the sentence.
    found = match.group()
    url = found.rstrip(".,;:!?)]}")
    return redact_url(url) + found[len(url):]
