#!/usr/bin/env python3
"""Renders a notebook kept as a plain script (cells are `# %%` comments,
Jupytext's "percent" format) into one HTML page beside it: each markdown cell
as text, each code cell with what it printed and, when its last line is an
expression, that value (its `_repr_html_` in a frame, as Jupyter shows it).

    PYTHONPATH=python python3 tools/render_notebook.py examples/quickstart_notebook.py

Needs python3-markdown (`AUTOSHARD_WITH_TORCH=1 scripts/setup.sh` installs
it); the notebooks themselves do not.
"""

import ast
import contextlib
import html
import io
import os
import sys

import markdown

STYLE = """body { font: 15px/1.5 system-ui, sans-serif; max-width: 980px; margin: 2em auto; color: #222; }
pre { background: #f6f8fa; padding: .7em 1em; overflow-x: auto; border-radius: 4px; }
pre.out { background: #fff; border-left: 3px solid #9ab; }
iframe { width: 100%; height: 900px; border: 1px solid #ccc; }
code { background: #f3f3f3; padding: 0 .2em; }"""


def cells(source):
    """[(kind, text)]: kind "markdown" or "code", split at `# %%` lines."""
    out, kind, lines = [], None, []
    for line in source.splitlines():
        if line.startswith("# %%"):
            if kind:
                out.append((kind, "\n".join(lines).strip("\n")))
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind == "markdown":
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
        elif kind:
            lines.append(line)
    if kind:
        out.append((kind, "\n".join(lines).strip("\n")))
    return out


def run_code(code, namespace):
    """Runs a cell; returns (printed text, the last expression's value or None)."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(tree, "<cell>", "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"),
                     namespace) if last else None
    return printed.getvalue(), value


def value_html(value):
    if value is None:
        return ""
    if hasattr(value, "_repr_html_"):
        return f'<iframe srcdoc="{html.escape(value._repr_html_(), quote=True)}"></iframe>'
    return f'<pre class="out">{html.escape(repr(value))}</pre>'


def render(path):
    namespace = {"__name__": "__main__"}
    parts = []
    for kind, text in cells(open(path, encoding="utf-8").read()):
        if kind == "markdown":
            parts.append(markdown.markdown(text))
            continue
        printed, value = run_code(text, namespace)
        parts.append(f"<pre>{html.escape(text)}</pre>")
        if printed:
            parts.append(f'<pre class="out">{html.escape(printed)}</pre>')
        parts.append(value_html(value))
    title = html.escape(os.path.basename(path))
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: render_notebook.py NOTEBOOK.py   (writes NOTEBOOK.html beside it)")
    path = sys.argv[1]
    page = render(path)
    out = os.path.splitext(path)[0] + ".html"
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(out + ".tmp", out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
