"""Inline SVG charts for the HTML report (no scripts, no external resources)."""

from __future__ import annotations

from html import escape

COLORS = {
    "PASS": "#2e7d32", "FAIL": "#c62828", "ERROR": "#ad1457", "SKIP": "#9e9e9e",
    "XFAIL": "#ef6c00", "XPASS": "#7cb342", "CRASH": "#4a148c", "TIMEOUT": "#6d4c41",
    "NOT_RUN": "#cfd8dc", "BLOCKED": "#8d6e63",
    "native": "#2e7d32", "decomposed": "#81c784", "fallback": "#fbc02d", "error": "#ad1457",
    "wrong": "#c62828", "crash": "#4a148c", "timeout": "#6d4c41", "blocked": "#8d6e63",
    "unsupported": "#bdbdbd",
    "MUST not met": "#c62828", "SHOULD not met": "#f9a825", "met": "#2e7d32",
    "skipped": "#9e9e9e", "not tested": "#cfd8dc",
    "MUST failing": "#c62828", "SHOULD failing": "#f9a825",
}
# The narrowest an emphasized segment is drawn: one MUST failure among thousands of
# passing tests must still be seen.
MIN_EMPHASIZED_PX = 6.0


def stacked_bars(rows: list[tuple[str, dict[str, int]]], keys: list[str], title: str,
                 width: int = 760, emphasize: tuple[str, ...] = ()) -> str:
    """One horizontal bar per row, segments per key, proportional to the row total;
    a segment of a key in `emphasize` is at least MIN_EMPHASIZED_PX wide (the other
    segments of its bar shrink to make room)."""
    label_w, bar_h, gap, top = 150, 18, 8, 28
    legend_h = 22
    height = top + len(rows) * (bar_h + gap) + legend_h + 10
    bar_w = width - label_w - 70
    parts = [(f'<svg role="img" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" aria-label="{escape(title)}">'),
             f'<text x="0" y="16" font-size="14" font-weight="bold">{escape(title)}</text>']
    for i, (label, counts) in enumerate(rows):
        y = top + i * (bar_h + gap)
        total = sum(counts.get(k, 0) for k in keys)
        parts.append(f'<text x="0" y="{y + 13}" font-size="12">{escape(label[:22])}</text>')
        x = float(label_w)
        widths = {k: bar_w * counts.get(k, 0) / total if total else 0.0 for k in keys}
        for k in emphasize:
            if counts.get(k, 0) and k in widths:
                widths[k] = max(widths[k], MIN_EMPHASIZED_PX)
        rest = sum(w for k, w in widths.items() if k not in emphasize)
        room = bar_w - sum(widths[k] for k in emphasize if k in widths)
        scale = room / rest if rest > 0 else 1.0
        for k in keys:
            n = counts.get(k, 0)
            if not n or not total:
                continue
            w = widths[k] if k in emphasize else widths[k] * scale
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" '
                         f'height="{bar_h}" fill="{COLORS.get(k, "#607d8b")}">'
                         f'<title>{escape(label)}: {n} {escape(k)}</title></rect>')
            x += w
        parts.append(f'<text x="{label_w + bar_w + 6}" y="{y + 13}" font-size="12">'
                     f'{total}</text>')
    y = top + len(rows) * (bar_h + gap) + 4
    x = 0
    for k in keys:
        parts.append(f'<rect x="{x}" y="{y}" width="12" height="12" '
                     f'fill="{COLORS.get(k, "#607d8b")}"/>'
                     f'<text x="{x + 16}" y="{y + 11}" font-size="11">{escape(k)}</text>')
        x += 26 + 7 * len(k)
    parts.append("</svg>")
    return "".join(parts)


def bars(items: list[tuple[str, int]], title: str, width: int = 760,
         color: str = "#ad1457") -> str:
    """A horizontal bar chart of labelled counts."""
    label_w, bar_h, gap, top = 220, 16, 6, 28
    height = top + max(1, len(items)) * (bar_h + gap) + 6
    peak = max((n for _, n in items), default=1) or 1
    bar_w = width - label_w - 60
    parts = [(f'<svg role="img" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" aria-label="{escape(title)}">'),
             f'<text x="0" y="16" font-size="14" font-weight="bold">{escape(title)}</text>']
    if not items:
        parts.append(f'<text x="0" y="{top + 12}" font-size="12">none</text>')
    for i, (label, n) in enumerate(items):
        y = top + i * (bar_h + gap)
        w = bar_w * n / peak
        parts.append(f'<text x="0" y="{y + 12}" font-size="12">{escape(label[:34])}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" '
                     f'fill="{color}"><title>{escape(label)}: {n}</title></rect>'
                     f'<text x="{label_w + w + 4:.1f}" y="{y + 12}" font-size="12">{n}</text>')
    parts.append("</svg>")
    return "".join(parts)
