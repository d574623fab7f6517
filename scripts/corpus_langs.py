#!/usr/bin/env python3
"""corpus_langs.py: the calibration corpus's samples in German, French,
Russian, Korean, Spanish, Italian and Polish (corpus/calib.txt, samples
65-76; corpus/SOURCES.md lists them), printed in --samples form, each
preceded by a `---` line, to stdout.

Each is a run of whole paragraphs of a Debian bookworm manual page,
rendered by `man -E UTF-8 -l` at MANWIDTH=1000 (no wrapping, no
hyphenation) and `col -bx`, runs of white space in a line squeezed to one
space, paragraphs one per line: the page's paragraphs are cut, in order,
into blocks of whole paragraphs of at least SIZE characters, and block N
is taken. No held-out set reads these pages (testdata/real/SOURCES.md:
the agent set's pages are dpkg's, shadow's and psmisc's, heldout.txt's
man-db's Simplified Chinese ones); scripts/real_heldout_agent.py --check
testdata/real/heldout-agent.txt finds no run shared with the result.

usage: python3 scripts/corpus_langs.py > samples.txt
"""
import subprocess
import sys

M = "/usr/share/man"
# (language, package, page, SIZE, N)
PICKS = [
    ("German", "apt 2.6.1", f"{M}/de/man8/apt-get.8.gz", 1300, 1),
    ("German", "apt 2.6.1", f"{M}/de/man8/apt-get.8.gz", 1300, 9),
    ("German", "adduser 3.134", f"{M}/de/man8/adduser.8.gz", 1300, 2),
    ("French", "apt 2.6.1", f"{M}/fr/man8/apt-cache.8.gz", 1300, 1),
    ("French", "adduser 3.134", f"{M}/fr/man8/adduser.8.gz", 1300, 2),
    ("Russian", "vim-common 9.0.1378", f"{M}/ru/man1/vim.1.gz", 700, 1),
    ("Russian", "man-db 2.11.2", f"{M}/ru/man1/man.1.gz", 700, 3),
    ("Korean", "man-db 2.11.2", f"{M}/ko/man1/man.1.gz", 380, 5),
    ("Korean", "xz-utils 5.4.1", f"{M}/ko/man1/xz.1.gz", 380, 20),
    ("Spanish", "fakeroot 1.31", f"{M}/es/man1/fakeroot.1.gz", 1100, 1),
    ("Italian", "vim-common 9.0.1378", f"{M}/it/man1/vim.1.gz", 1300, 1),
    ("Polish", "procps 4.0.2", f"{M}/pl/man1/free.1.gz", 1300, 0),
]


def paragraphs(page):
    out = subprocess.run(f"MANWIDTH=1000 man -E UTF-8 -l {page} 2>/dev/null | col -bx", shell=True,
                         capture_output=True, text=True, check=True).stdout
    paras, cur = [], []
    for line in out.split("\n"):
        if line.strip():
            cur.append(" ".join(line.split()))
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return paras


def block(page, size, n):
    blocks, cur = [], []
    for p in paragraphs(page):
        cur.append(p)
        if sum(len(x) for x in cur) >= size:
            blocks.append("\n".join(cur))
            cur = []
    if cur:
        blocks.append("\n".join(cur))
    return blocks[n]


def main():
    for _, _, page, size, n in PICKS:
        sys.stdout.write("---\n" + block(page, size, n).rstrip() + "\n")


if __name__ == "__main__":
    main()
