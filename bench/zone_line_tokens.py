"""What time-context's zone line (``zoneLine: true``) costs the model, in characters and tokens.

For each of the reference's three variants (``resolved`` for a short and a long zone name,
``mixed`` for two zones, ``unavailable``) it renders the exact line with the plugin's own code,
adds the joining newline, and counts: characters, the chars/4 rule, and tokens of the DeepSeek
tokenizer (the one the compact plugin's ``estimator: deepseek`` loads; the dev group installs
it). The same for the whole reading (wrapped in ``<context source="plugin">`` and
``</context>``) without and with the line, at a fixed instant.

``python -m bench.zone_line_tokens`` prints the table; ``run()`` returns the rows.
"""

from __future__ import annotations

from typing import Any

from dsh.plugins.compact.estimate import load_deepseek_tokenizer
from dsh.plugins.time_context import render_reading, resolve_zone
from dsh.plugins.time_context.request_zone import RequestZone, render_zone_line

NOW = 1_796_112_000_000  # 2026-12-01T08:00:00Z
CASES: list[tuple[str, RequestZone]] = [
    ("resolved, short (UTC)", RequestZone("resolved", ("UTC",))),
    ("resolved (Asia/Tokyo)", RequestZone("resolved", ("Asia/Tokyo",))),
    ("resolved, long (America/Argentina/ComodRivadavia)", RequestZone("resolved", ("America/Argentina/ComodRivadavia",))),
    ("mixed (America/New_York, Asia/Singapore)", RequestZone("mixed", ("America/New_York", "Asia/Singapore"))),
    ("unavailable", RequestZone("missing")),
]


def run() -> list[dict[str, Any]]:
    tokenizer = load_deepseek_tokenizer()

    def tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    rows = []
    for label, request in CASES:
        line = render_zone_line(request) + "\n"
        zone_key = request.zones[0] if request.kind == "resolved" else "UTC"
        zone, name = resolve_zone(zone_key)
        without = render_reading(3, 1, NOW, NOW - 125_000, zone, name)
        with_line = render_reading(3, 1, NOW, NOW - 125_000, zone, name, render_zone_line(request))
        wrap = '<context source="plugin">{}</context>'
        rows.append(
            {
                "case": label,
                "chars": len(line),
                "chars/4": round(len(line) / 4),
                "tokens": tokens(line),
                "reading tokens without": tokens(wrap.format(without)),
                "reading tokens with": tokens(wrap.format(with_line)),
            }
        )
    return rows


def main() -> None:
    rows = run()
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))


if __name__ == "__main__":
    main()
