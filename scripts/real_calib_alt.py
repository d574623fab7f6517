#!/usr/bin/env python3
"""real_calib_alt.py WORK_DIR: a calibration text to set against the
embedded corpus (docs/calibration.md#the-embedded-corpus), in --samples form
(64 samples of about 1500 characters, `---` between them), from this host's
CPython 3.11, Go and Debian installs: WORK_DIR/calib-domain.txt, the
held-out text's own kinds and sources, other parts: CPython's language
reference topics, Python and Go standard-library source, shadow's
Simplified Chinese man pages.

It shares no 32-character run with testdata/real/heldout.txt: a paragraph
that does is dropped."""
import pathlib
import random
import re
import subprocess
import sys

sys.path.insert(0, "/usr/lib/python3.11")
from pydoc_data import topics  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
HELD = (REPO / "testdata" / "real" / "heldout.txt").read_text(encoding="utf-8")
N = 32
GRAMS = {HELD[i:i + N] for i in range(len(HELD) - N)}


def clean(t):
    t = "\n".join(line.rstrip() for line in t.splitlines())
    return re.sub(r"\n{3,}", "\n\n", t).strip()


def man(path):
    return subprocess.run(f"MANWIDTH=80 man -l {path} 2>/dev/null | col -bx", shell=True,
                          capture_output=True, text=True, check=False).stdout


def chunks(text, size=1500):
    out, cur = [], ""
    for p in (p for p in clean(text).split("\n\n") if p.strip() and p.strip() != "---"):
        if any(p[i:i + N] in GRAMS for i in range(max(1, len(p) - N))):
            continue
        cur = cur + "\n\n" + p if cur else p
        if len(cur) >= size:
            out.append(cur[:4000])
            cur = ""
    if len(cur) > 200:
        out.append(cur)
    return out


def write(path, texts, seed):
    samples = [c for t in texts for c in chunks(t)]
    random.Random(seed).shuffle(samples)
    samples = samples[:64]
    path.write_text("\n---\n".join(samples) + "\n", encoding="utf-8")
    print(f"{path}: {len(samples)} samples, {sum(map(len, samples))} characters")


def main():
    work = pathlib.Path(sys.argv[1])
    prose = [topics.topics[k] for k in ["for", "while", "if", "class", "function", "assignment", "lambda", "return",
                                        "raise", "yield", "string-methods", "formatstrings", "typesseq",
                                        "typesmapping", "calls", "slicings"]]
    py = [pathlib.Path("/usr/lib/python3.11", f).read_text() for f in ["heapq.py", "textwrap.py", "fnmatch.py", "shlex.py", "queue.py"]]
    go = [pathlib.Path("/usr/local/go/src", f).read_text() for f in ["container/heap/heap.go", "sort/sort.go", "strings/builder.go",
                                                                     "bytes/buffer.go", "unicode/utf8/utf8.go"]]
    zh = [man(f"/usr/share/man/zh_CN/{f}.gz") for f in ["man1/passwd.1", "man1/chage.1", "man5/shadow.5", "man5/login.defs.5",
                                                         "man1/gpasswd.1", "man5/passwd.5"]]
    write(work / "calib-domain.txt", prose + py + go + zh, 2)


if __name__ == "__main__":
    main()
