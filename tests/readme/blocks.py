"""Turns the README's runnable examples into one script, in the README's order.

Runnable: every ```sh block that uses the mock agent (the word `mock`), every ```python and
```js block that does, and step 1 of "Set up" (`cargo run --release -- server …`), which
becomes the debug binary's server in the background (`__server …`). Every line of a runnable
block runs as written, with two changes: the daemon's address `127.0.0.1:2468` (and
`localhost:2468`) becomes the test daemon's port, and a line ending with `# → TEXT` checks
that the command prints TEXT (whitespace ignored, `…` standing for anything; a `curl` without
`-X`, which only reads, is retried for up to 10 s while the daemon catches up).

Usage: blocks.py README.md OUT_DIR PORT — writes OUT_DIR/readme.sh (and the python and js
blocks beside it) and prints what it took.
"""

import re
import sys
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\s*$")
MOCK = re.compile(r"\bmock\b")
SERVER = re.compile(r"^cargo run --release -- server (.*)$")
EXPECT = re.compile(r"^(.*?)\s+# → (.*)$")


def blocks(text):
    """(language, lines) of each fenced block, in order."""
    lang, lines = None, []
    for line in text.splitlines():
        m = FENCE.match(line)
        if lang is None and m:
            lang, lines = m.group(1), []
        elif lang is not None and line.startswith("```"):
            yield lang, lines
            lang = None
        elif lang is not None:
            lines.append(line)


def quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def pattern(expected):
    """A bash glob for the expected output without its whitespace; `…` matches anything."""
    out = []
    for c in re.sub(r"\s+", "", expected):
        if c == "…":
            out.append("*")
        elif c in "\\*?[]":
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def logical_lines(lines):
    """Lines with their `\\` continuations joined."""
    pending = ""
    for line in lines:
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def sh_lines(lines, port):
    out = []
    checks = 0
    for line in logical_lines(lines):
        line = line.replace("127.0.0.1:2468", f"127.0.0.1:{port}")
        line = line.replace("localhost:2468", f"localhost:{port}")
        m = EXPECT.match(line)
        if m and not line.lstrip().startswith("#"):
            command, expected = m.group(1).rstrip(), m.group(2).strip()
            retry = 1 if re.match(r"^curl\b", command) and " -X" not in command else 0
            out.append(f"__check {retry} {quote(pattern(expected))} {quote(expected)} <<'__CMD'")
            out.append(command)
            out.append("__CMD")
            checks += 1
        else:
            out.append(line)
    return out, checks


def main():
    readme, out_dir, port = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    script = []
    taken = {"sh": 0, "python": 0, "js": 0, "server": 0, "checks": 0}
    for n, (lang, lines) in enumerate(blocks(readme.read_text())):
        text = "\n".join(lines)
        if lang == "sh":
            servers = [SERVER.match(l) for l in lines]
            for m in servers:
                if m:
                    script.append(f"__server {m.group(1)}")
                    taken["server"] += 1
            if not MOCK.search(text):
                continue
            body, checks = sh_lines(lines, port)
            script.append(f"__block {n} sh")
            script.extend(body)
            taken["sh"] += 1
            taken["checks"] += checks
        elif lang in ("python", "js") and MOCK.search(text):
            ext = "py" if lang == "python" else "mjs"
            file = out_dir / f"block{n}.{ext}"
            file.write_text(text.replace("127.0.0.1:2468", f"127.0.0.1:{port}") + "\n")
            script.append(f"__block {n} {lang}")
            script.append(f"__{lang} {quote(str(file))}")
            taken[lang] += 1
    (out_dir / "readme.sh").write_text("\n".join(script) + "\n")
    print(" ".join(f"{k}={v}" for k, v in taken.items()))


if __name__ == "__main__":
    main()
