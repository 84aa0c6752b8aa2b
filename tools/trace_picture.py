#!/usr/bin/env python3
"""Draws one step of a measured and a predicted timeline side by side as an
HTML page (inline SVG), for the README's picture of what Perfetto shows
(tools/render_pages.sh screenshots it; Perfetto itself is a web app).

    tools/trace_picture.py MEASURED.json PREDICTED.json OUT.html

Rows: each device of the measured file (its first step), then each device of
the predicted one; slices coloured by kind (compute by op, collectives
darker), on one time axis in milliseconds.
"""

import html
import json
import sys

COLOURS = {"einsum": "#4e79a7", "add": "#59a14f", "mul": "#8cd17d", "softmax": "#b07aa1",
           "normalize": "#b6992d", "adam_update": "#f28e2b"}
COLLECTIVE = "#e15759"
OTHER = "#bab0ac"


def first_step(events):
    """The slices of each device track within the first step slice."""
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    step = min(steps, key=lambda e: e["ts"])
    begin, end = step["ts"], step["ts"] + step["dur"]
    rows = {}
    for e in events:
        if e["ph"] != "X" or e["cat"] == "step" or not begin <= e["ts"] <= end:
            continue
        rows.setdefault(names.get(e["tid"], str(e["tid"])), []).append(
            (e["ts"] - begin, e["dur"], e["name"], e["cat"]))
    return step["dur"], dict(sorted(rows.items()))


def colour(name, category):
    if category == "collective":
        return COLLECTIVE
    return COLOURS.get(name.split(" ")[0], OTHER)


def main():
    measured, predicted, out = sys.argv[1:4]
    blocks = [("measured", *first_step(json.load(open(measured))["traceEvents"])),
              ("predicted", *first_step(json.load(open(predicted))["traceEvents"]))]
    span = max(b[1] for b in blocks)
    width, label, row_h = 1100, 230, 26
    rows = [(f"{kind}: {track}", slices) for kind, _, tracks in blocks
            for track, slices in tracks.items()]
    height = 40 + row_h * len(rows) + 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + label + 20}" '
           f'height="{height}" font-family="DejaVu Sans, sans-serif" font-size="12">']
    scale = width / span
    for r, (name, slices) in enumerate(rows):
        y = 30 + r * row_h
        svg.append(f'<text x="4" y="{y + 16}">{html.escape(name)}</text>')
        svg.append(f'<rect x="{label}" y="{y}" width="{width}" height="{row_h - 6}" '
                   'fill="#f4f4f4"/>')
        for ts, dur, op, cat in slices:
            svg.append(f'<rect x="{label + ts * scale:.2f}" y="{y}" '
                       f'width="{max(dur * scale, 0.5):.2f}" height="{row_h - 6}" '
                       f'fill="{colour(op, cat)}"><title>{html.escape(op)} '
                       f'{dur:.1f} us</title></rect>')
    axis_y = 30 + row_h * len(rows) + 10
    ticks = 5
    for k in range(ticks + 1):
        t = span * k / ticks
        x = label + t * scale
        svg.append(f'<line x1="{x:.1f}" y1="{axis_y - 4}" x2="{x:.1f}" y2="{axis_y + 2}" '
                   'stroke="#333"/>')
        svg.append(f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">'
                   f'{t / 1000:.2f} ms</text>')
    legend = list(COLOURS.items()) + [("collective", COLLECTIVE), ("other", OTHER)]
    for k, (name, c) in enumerate(legend):
        x = label + k * 110
        svg.append(f'<rect x="{x}" y="6" width="12" height="12" fill="{c}"/>'
                   f'<text x="{x + 16}" y="16">{html.escape(name)}</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("<!doctype html><html><head><meta charset='utf-8'><title>timelines</title>"
                "</head><body style='margin:8px;background:#fff'>"
                "<h3 style='font-family:DejaVu Sans,sans-serif'>One training step, measured "
                "and predicted (autoshard train --trace, plan --predict --trace)</h3>"
                + "".join(svg) + "</body></html>\n")


if __name__ == "__main__":
    main()
