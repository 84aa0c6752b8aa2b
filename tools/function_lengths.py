#!/usr/bin/env python3
"""Lists C++ functions longer than a limit (120 lines by default).

The project keeps functions short (docs/architecture.md): this finds the
long ones in src/ and python/src without a compiler. It reads each .cc and
.h file with comments, strings and preprocessor lines blanked out, then
matches braces: a `{` at namespace or class scope whose text since the last
`;`, `{` or `}` reads like a function head (a parameter list, no `=`, not a
namespace, class, struct, union or enum) opens a function, which ends at
its matching `}`; a function's length runs from its head's first line to
that `}`. Lambdas and local classes count as part of their function.

    tools/function_lengths.py                 # every function over 120 lines
    tools/function_lengths.py --max 80 src/ir # another limit, other roots
    tools/function_lengths.py --check tools/long_functions.txt

With --check, the listed functions (`path name` per line, `#` comments) may
stay long; the exit status is 1 when a function not listed is over the
limit. A listed one that is no longer long (or has moved) is named, so that
the list only shrinks, without failing: the helpers who shorten or move
them merge separately.
"""

import argparse
import os
import re
import sys

SCOPE_KEYWORDS = ("namespace", "struct", "class", "union", "extern")
NOT_FUNCTION_KEYWORDS = ("enum",)
# Words after a parameter list that still lead into the body.
BODY_WORDS = ("const", "noexcept", "override", "final", "mutable", "try")


def blank_out(text):
    """The text with comments, string and character literals and
    preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            open_paren = text.find("(", i)
            delim = text[i + 2:open_paren]
            end = text.find(")" + delim + '"', open_paren)
            end = n if end < 0 else end + len(delim) + 2
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:end - 1]) + '"')
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(head):
    """The name before the parameter list of a function head, or None when
    the head is not a function's."""
    head = " ".join(head.split())
    head = re.sub(r"^(template\s*<[^{;]*?>\s*)+", "", head)
    first = head.split(" ", 1)[0] if head else ""
    if not head or first in NOT_FUNCTION_KEYWORDS:
        return None
    if first in SCOPE_KEYWORDS and (first != "extern" or "(" not in head):
        return None  # extern "C" int f(...) is a function
    # The first parameter list at depth 0 of parentheses (not decltype's).
    depth, open_at = 0, -1
    for k, ch in enumerate(head):
        if ch == "(":
            if depth == 0 and open_at < 0 and not re.search(r"(decltype|alignas|__attribute__)\s*$",
                                                            head[:k]):
                open_at = k
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "=" and depth == 0 and not re.search(r"operator\s*\S*$", head[:k + 1]):
            if not head[k - 1:k + 1] in ("==", "!=", "<=", ">=") and head[k + 1:k + 2] != "=":
                return None  # a variable's initializer
    if open_at < 0:
        return None
    name = re.search(r"(operator\s*\S+?|~?[A-Za-z_]\w*)\s*(<[^()]*>)?\s*$", head[:open_at])
    return name.group(1) if name else None


def functions(path):
    """(name, first line, last line) of every function defined in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank_out(f.read())
    found = []
    stack = []  # "scope" (namespace, class) or "skip" (data, enum) braces
    head_start = 0  # where the text since the last ; { } begins
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == ";":
            head_start = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            head_start = i + 1
        elif c == "{":
            head = text[head_start:i]
            if head.count("(") > head.count(")"):
                i = matching_brace(text, i) + 1  # a default argument's {}
                continue
            before = head.rstrip()
            word = re.search(r"(\w+)$", before)
            init_list = re.search(r"\)\s*:", head) is not None
            trailing_return = re.search(r"\)\s*->", head) is not None
            brace_init = (word and word.group(1) not in BODY_WORDS and not trailing_return
                          and (init_list or "(" not in head))
            name = None if brace_init else function_name(head)
            if brace_init and init_list:
                i = matching_brace(text, i) + 1  # a member's brace initializer
                continue
            if name:
                end = matching_brace(text, i)
                # A function-try-block's handlers: f() try { ... } catch (...) { ... }
                while re.match(r"\s*catch\b", text[end + 1:end + 64]):
                    end = matching_brace(text, text.index("{", end + 1))
                first = head_start + len(head) - len(head.lstrip())
                found.append((name, text.count("\n", 0, first) + 1, text.count("\n", 0, end) + 1))
                i = end + 1
                head_start = i
                continue
            stack.append("scope")
            head_start = i + 1
        i += 1
    return found


def matching_brace(text, open_at):
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def sources(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for folder, _, files in os.walk(root):
            for name in sorted(files):
                if name.endswith((".cc", ".h", ".cpp", ".hpp")):
                    yield os.path.join(folder, name)


def read_allowed(path):
    allowed = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) >= 2:
                allowed.add((line[0], line[1]))
    return allowed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", default=["src", "python/src"])
    parser.add_argument("--max", type=int, default=120, help="the most lines a function may have")
    parser.add_argument("--check", metavar="ALLOWED", help="functions that may stay long")
    args = parser.parse_args()
    long = []
    for path in sources(args.roots):
        for name, first, last in functions(path):
            if last - first + 1 > args.max:
                long.append((last - first + 1, os.path.normpath(path), first, name))
    long.sort(key=lambda f: (-f[0], f[1]))
    for lines, path, first, name in long:
        print(f"{lines:5d}  {path}:{first}  {name}")
    if not args.check:
        return 0
    allowed = read_allowed(args.check)
    seen = {(path, name) for _, path, _, name in long}
    status = 0
    for lines, path, first, name in long:
        if (path, name) not in allowed:
            print(f"{path}:{first}: {name} has {lines} lines, over {args.max}: split it into "
                  f"named steps", file=sys.stderr)
            status = 1
    for path, name in sorted(allowed - seen):
        print(f"{args.check}: {path} {name} is no longer over {args.max} lines (or has moved): "
              f"take it off the list", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
