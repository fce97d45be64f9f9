#!/usr/bin/env python3
"""names-in-strings.py [--exempt SPEC] DIR...: prints every string literal in code (not in comments, nor in a .td
file's [{ ... }] descriptions) of the C++, TableGen and configured sources under DIR that names a schedule, an
instruction family or an architecture as a word, one `file:line: name: "literal"` a line; exit 1 when there is one.
SPEC: lines `file|first|last|reason`; in `file`, the lines from one matching the regex `first` to the next one
matching `last` are a declared list and are not reported. Used by check-layering.sh."""
import os
import re
import sys

NAMES = r"fa1|fa2|fa3|fa4|decode|sm80|sm90|sm100|sm_80|sm_90a|sm_100a"
# A name as a word of its own: "decode-sized" (a class of calls) and "fa2_causal" are other words.
WORD = re.compile(r"(?<![A-Za-z0-9_-])(" + NAMES + r")(?![A-Za-z0-9_-])")
RAW = re.compile(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(')


def literals(text, td):
    """Yields (line, body) of every string literal outside comments (raw strings included)."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        for opening, closing in (("/*", "*/"),) + ((("[{", "}]"),) if td else ()):
            if text.startswith(opening, i):
                j = text.find(closing, i + 2)
                j = n if j < 0 else j + 2
                line += text.count("\n", i, j)
                i = j
                break
        else:
            raw = RAW.match(text, i)
            if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                end = ")" + raw.group(1) + '"'
                j = text.find(end, raw.end())
                j = n if j < 0 else j
                yield line, text[raw.end():j]
                line += text.count("\n", i, j)
                i = j + len(end)
                continue
            if c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):  # 1'000 is a digit separator
                j = i + 1
                while j < n and text[j] != c and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                if c == '"':
                    yield line, text[i + 1:j]
                i = j + 1
                continue
            i += 1


def exempt_lines(spec):
    """file -> the set of line numbers of its declared lists."""
    ranges = {}
    for entry in filter(None, (l.strip() for l in spec.splitlines())):
        path, first, last, _reason = entry.split("|", 3)
        ranges.setdefault(path, []).append((re.compile(first), re.compile(last)))
    lines = {}
    for path, pairs in ranges.items():
        if not os.path.exists(path):
            continue
        text = open(path, encoding="utf-8", errors="replace").read().splitlines()
        for first, last in pairs:
            start = next((k for k, l in enumerate(text) if first.search(l)), None)
            if start is None:
                continue
            end = next((k for k in range(start, len(text)) if last.search(text[k])), start)
            lines.setdefault(path, set()).update(range(start + 1, end + 2))
    return lines


def main(argv):
    spec = ""
    if argv[:1] == ["--exempt"]:
        spec, argv = argv[1], argv[2:]
    exempt = exempt_lines(spec)
    found = False
    for root in argv:
        for directory, subdirectories, files in os.walk(root):
            subdirectories[:] = sorted(d for d in subdirectories if d != "tests")  # a layer's tests may name anything
            for name in sorted(files):
                if not name.endswith((".cpp", ".h", ".td", ".in")):
                    continue
                path = os.path.join(directory, name)
                text = open(path, encoding="utf-8", errors="replace").read()
                for line, body in literals(text, path.endswith(".td")):
                    if line in exempt.get(path, ()):
                        continue
                    for word in WORD.finditer(body):
                        print(f'{path}:{line}: {word.group(1)}: "{body[:100]}"')
                        found = True
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
