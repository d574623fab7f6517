#!/usr/bin/env python3
"""real_heldout.py: assemble testdata/real/heldout.txt and its CI slice from texts on the host.

usage: real_heldout.py OUT_DIR   (writes OUT_DIR/heldout.txt and heldout-ci.txt)

Parts (testdata/real/SOURCES.md lists them with their licenses): sections of
CPython 3.11.7's language reference (Lib/pydoc_data/topics.py), CPython and
Go standard-library source files, and Chinese man pages (man-db zh_CN,
shadow zh_TW) rendered by `man -l` at 80 columns. They are interleaved
prose, code, Chinese so that any stretch of a few thousand tokens holds all
three kinds, and joined by blank lines. The file has no line holding only
"---", so `sparkconv eval --samples` reads it as one sample whose token
stream is the file's text, the stream llama-perplexity reads.
"""

import os
import re
import subprocess
import sys

PY = "/root/.pyenv/versions/3.11.7/lib/python3.11"
GO = "/usr/local/go/src"

PROSE = ["execmodel", "import", "try", "comparisons", "with"]
CODE = [PY + "/graphlib.py", GO + "/container/list/list.go", PY + "/bisect.py",
        GO + "/container/ring/ring.go", PY + "/colorsys.py"]
ZH = ["/usr/share/man/zh_CN/man1/apropos.1.gz", "/usr/share/man/zh_CN/man8/mandb.8.gz"]
# man-db's pages share option texts with man.1, which the calibration corpus
# holds: a paragraph sharing any 16-character run with it is dropped.
CALIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus", "calib.txt")
RUN = 16
# The CI slice: the first CI_CHARS[kind] characters of the first part of
# each kind, cut at a line end, as three samples.
CI_CHARS = {"prose": 2400, "code": 2000, "zh": 1100}


def man(path):
    env = dict(os.environ, MANWIDTH="80", LANG="C.UTF-8")
    txt = subprocess.run(["man", "-l", path], env=env, capture_output=True, check=True).stdout
    txt = subprocess.run(["col", "-bx"], input=txt, capture_output=True, check=True).stdout
    return txt.decode("utf-8")


def clean(t):
    lines = [l.rstrip() for l in t.replace("\r\n", "\n").split("\n")]
    t = "\n".join(lines).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", t)


def disjoint(t, calib):
    """t without the paragraphs that share a RUN-character run with calib."""
    runs = {calib[i:i + RUN] for i in range(len(calib) - RUN + 1)}
    keep = [p for p in t.split("\n\n")
            if not any(p[i:i + RUN] in runs for i in range(len(p) - RUN + 1))]
    return "\n\n".join(keep)


def main():
    sys.path.insert(0, PY)
    from pydoc_data.topics import topics
    prose = [topics[k] for k in PROSE]
    code = [open(p, encoding="utf-8").read() for p in CODE]
    calib = open(CALIB, encoding="utf-8").read()
    zh = [disjoint(clean(man(p)), calib) for p in ZH]
    parts = []
    for i in range(max(len(prose), len(code), len(zh))):
        for group in (prose, code, zh):
            if i < len(group):
                parts.append(clean(group[i]))
    text = "\n\n".join(parts) + "\n"
    if any(l.strip() == "---" for l in text.split("\n")):
        sys.exit("real_heldout.py: a line holds only ---")
    write(os.path.join(sys.argv[1], "heldout.txt"), text)
    ci = []
    for kind, group in (("prose", prose), ("code", code), ("zh", zh)):
        t = clean(group[0])
        cut = t.rfind("\n", 0, CI_CHARS[kind])
        ci.append(t[:cut].rstrip())
    write(os.path.join(sys.argv[1], "heldout-ci.txt"), "\n---\n".join(ci) + "\n")


def write(path, text):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


if __name__ == "__main__":
    main()
