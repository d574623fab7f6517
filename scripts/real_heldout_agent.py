#!/usr/bin/env python3
"""real_heldout_agent.py: assemble testdata/real/heldout-agent.txt and its CI slice.

usage: real_heldout_agent.py OUT_DIR          (writes OUT_DIR/heldout-agent.txt
                                               and OUT_DIR/heldout-agent-ci.txt)
       real_heldout_agent.py --check FILE...  (checks files against the references)

A second held-out set, disjoint from the first (testdata/real/heldout.txt),
of the text an on-device agent model is fed: ChatML agent transcripts with
JSON tool calls and results, raw JSON, JSON lines and config (TOML, YAML),
code in C, Rust, JavaScript, shell and SQL, number-heavy tables and CSV,
man pages in Japanese, Korean, Traditional Chinese, German, French and
Russian, and markdown. One sample per part, separated by lines holding only "---" (the
`sparkconv eval --samples` form); testdata/real/SOURCES.md lists every part
with its source file and license.

Sources, all read from this host (Debian bookworm, Go 1.26.8, Node.js
20.20.2, Go 1.26.8, Rust 1.95.0, PostgreSQL 15.18, the Go module cache):
  transcripts  scripts/real_heldout_agent_chats.txt (written for this
               project, CC0-1.0), whose {{...}} tool results are built here
               from real data:
               country    /usr/share/iso-codes/json/iso_3166-1.json (iso-codes, LGPL-2.1+)
               currency   /usr/share/iso-codes/json/iso_4217.json
               subdivisions /usr/share/iso-codes/json/iso_3166-2.json
               timezones  /usr/share/zoneinfo/zone1970.tab (tzdata, public domain)
                          with offsets from Python's zoneinfo on the same tzdata
               file       /usr/lib/node_modules/npm/package.json (npm, Artistic-2.0)
               dpkg       /var/lib/dpkg/status (the packages' control data)
               gomod      ~/go/pkg/mod/cache/download/MODULE/@v/* (Go module
                          cache: version list, .info, .mod; the modules' licenses)
  the others   listed in PARTS below, with the license of each.

Every part is cleaned (CRLF to LF, trailing spaces stripped, runs of blank
lines squeezed to one) and cut at a line end near its character budget.
Before writing, every sample is checked against the calibration corpus
(corpus/calib.txt), the built-in held-out text
(corpus/heldout.txt) and testdata/real/heldout.txt: no run of 8
whitespace-separated words, and no run of 16 characters holding a CJK
character (white space removed: CJK text has none, and man pages wrap and
indent it anywhere), may be shared with any of them; a man page's paragraphs that
share one are dropped, and any other shared run stops the script.
"""

import gzip
import html.parser
import json
import os
import re
import subprocess
import sys
from datetime import datetime
from zoneinfo import ZoneInfo

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
REFS = [os.path.join(REPO, p) for p in
        ("corpus/calib.txt", "corpus/heldout.txt", "testdata/real/heldout.txt")]
CHATS = os.path.join(HERE, "real_heldout_agent_chats.txt")

ISO = "/usr/share/iso-codes/json"
GO = "/usr/local/go/src"
GOMOD = os.path.expanduser("~/go/pkg/mod")
RUST = os.path.expanduser("~/.rustup/toolchains/1.95.0-x86_64-unknown-linux-gnu/share/doc/rust/html/src")
MARKDOWN = "md"  # the page's extension (kept apart: the repo's docs test reads *.md names as repo files)
NODEDOC = "/usr/share/doc/nodejs/api"
NPM = "/usr/lib/node_modules/npm"
PG = "/usr/share/postgresql/15"
MAN = "/usr/share/man"

WORDS = 8   # shared whitespace-separated word run refused
CJK_RUN = 16  # shared run of characters holding a CJK character refused
CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


# ---- reading and cleaning

def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read()


def clean(t):
    lines = [l.rstrip() for l in t.replace("\r\n", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines).strip("\n"))


def head(t, chars):
    """t cut at the last line end before chars characters (all of t if shorter)."""
    t = clean(t)
    if len(t) <= chars:
        return t
    return t[:t.rfind("\n", 0, chars)].rstrip()


def between(t, start, chars):
    """head(t from the line holding start, chars)."""
    i = t.index(start)
    return head(t[t.rfind("\n", 0, i) + 1:], chars)


def man(path):
    env = dict(os.environ, MANWIDTH="80", LANG="C.UTF-8")
    txt = subprocess.run(["man", "-l", path], env=env, capture_output=True, check=True).stdout
    txt = subprocess.run(["col", "-bx"], input=txt, capture_output=True, check=True).stdout
    # groff leaves a glyph it cannot map as \[uXXXX]: the character meant
    txt = re.sub(r"\\\[u([0-9A-F]{4})\]", lambda m: chr(int(m.group(1), 16)), txt.decode("utf-8"))
    return clean(txt)


class _RustSource(html.parser.HTMLParser):
    """The source text of a rustdoc src/*.rs.html page, without line numbers."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth, self.skip, self.out = 0, 0, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "pre" and "rust" in (a.get("class") or "").split():
            self.depth = 1
        elif self.depth and tag == "a" and "data-nosnippet" in a:
            self.skip = 1

    def handle_endtag(self, tag):
        if tag == "pre":
            self.depth = 0
        elif tag == "a":
            self.skip = 0

    def handle_data(self, data):
        if self.depth and not self.skip:
            self.out.append(data)


def rust(path):
    p = _RustSource()
    p.feed(read(path))
    return "".join(p.out)


def tab_rows(path):
    return "\n".join(l for l in read(path).split("\n") if l and not l.startswith("#"))


# ---- tool results for the transcripts

def dumps(obj, indent=None):
    return json.dumps(obj, ensure_ascii=False, indent=indent)


def iso(name, key):
    return json.loads(read(f"{ISO}/iso_{name}.json"))[key]


def tool_country(*codes):
    recs = {r["alpha_2"]: r for r in iso("3166-1", "3166-1")}
    return dumps({"results": [recs[c] for c in codes], "standard": "ISO 3166-1"})


def tool_currency(code, rate, at):
    rec = next(r for r in iso("4217", "4217") if r["alpha_3"] == code)
    return dumps({"currency": rec, "rate": {"base": "EUR", "quote": code, "mid": float(rate),
                                            "as_of": at, "indicative": True}})


def tool_subdivisions(*codes):
    subs = {r["code"]: r for r in iso("3166-2", "3166-2")}
    countries = {r["alpha_2"]: r["name"] for r in iso("3166-1", "3166-1")}
    cc = codes[0].split("-")[0]
    return dumps({"country": {"alpha_2": cc, "name": countries[cc]},
                  "subdivisions": [subs[c] for c in codes]}, indent=2)


def _coord(s):
    """ISO 6709 +-DDMM[SS] or +-DDDMM[SS] as decimal degrees."""
    sign = -1 if s[0] == "-" else 1
    s = s[1:]
    deg_len = 2 if len(s) in (4, 6) else 3
    d, m, sec = int(s[:deg_len]), int(s[deg_len:deg_len + 2]), int(s[deg_len + 2:] or 0)
    return round(sign * (d + m / 60 + sec / 3600), 4)


def tool_timezones(cc, at):
    t = datetime.fromisoformat(at.replace("Z", "+00:00"))
    zones = []
    for row in tab_rows("/usr/share/zoneinfo/zone1970.tab").split("\n"):
        f = row.split("\t")
        if cc not in f[0].split(","):
            continue
        m = re.match(r"([+-]\d+)([+-]\d+)$", f[1])
        local = t.astimezone(ZoneInfo(f[2]))
        off = local.utcoffset().total_seconds() // 60
        z = {"tz": f[2], "countries": f[0].split(","), "iso6709": f[1],
             "lat": _coord(m.group(1)), "lon": _coord(m.group(2)),
             "utc_offset": "%s%02d:%02d" % ("-" if off < 0 else "+", abs(off) // 60, abs(off) % 60),
             "abbr": local.tzname(), "dst": bool(local.dst()), "local_time": local.isoformat()}
        if len(f) > 3:
            z["comment"] = f[3]
        zones.append(z)
    return dumps({"country": cc, "at": at, "zones": zones})


def tool_file(path, max_bytes):
    data = open(path, "rb").read()
    cut = data[:int(max_bytes)].decode("utf-8", "ignore")
    return dumps({"path": path, "size": len(data), "bytes_read": len(cut.encode()),
                  "truncated": len(data) > int(max_bytes), "encoding": "utf-8", "content": cut})


def tool_dpkg(*names):
    keep = ["Package", "Version", "Architecture", "Maintainer", "Installed-Size", "Depends",
            "Provides", "Conflicts", "Replaces", "Homepage", "Description"]
    found = []
    for para in read("/var/lib/dpkg/status").split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", para, re.M))
        if fields.get("Package") not in names:
            continue
        rec = {}
        for k in keep:
            if k not in fields:
                continue
            v = fields[k]
            if k in ("Depends", "Provides", "Conflicts", "Replaces"):
                v = [d.strip() for d in v.split(",")]
            elif k == "Installed-Size":
                v = int(v)
            rec[k.lower().replace("-", "_")] = v
        found.append(rec)
    found.sort(key=lambda r: names.index(r["package"]))
    return dumps({"packages": found, "source": "dpkg status"}, indent=2)


def tool_gomod(mod):
    d = f"{GOMOD}/cache/download/{mod}/@v"
    versions = read(f"{d}/list").split()
    return dumps({"module": mod, "versions": [json.loads(read(f"{d}/{v}.info")) for v in versions],
                  "latest_go_mod": read(f"{d}/{versions[-1]}.mod")})


TOOLS = {"country": tool_country, "currency": tool_currency, "subdivisions": tool_subdivisions,
         "timezones": tool_timezones, "file": tool_file, "dpkg": tool_dpkg, "gomod": tool_gomod}


def chats():
    """The transcripts of CHATS by name, their {{...}} tool results filled in."""
    text = read(CHATS)
    out = {}
    for block in re.split(r"^=== ", text, flags=re.M)[1:]:
        name, body = block.split("\n", 1)
        body = re.sub(r"\{\{(\w+) ([^}]*)\}\}", lambda m: TOOLS[m.group(1)](*m.group(2).split()), body)
        out[name.strip()] = clean(body)
    return out


# ---- the parts: (kind, text function, source, license)

def part_chat(name):
    return lambda: chats()[name]


def part_man(path, chars, refs, start=None):
    def f():
        t = man(path)
        if start:
            t = t[t.index(start):]
        return head(disjoint_paragraphs(t, refs), chars)
    return f


def part_file(path, chars, start=None):
    def f():
        t = clean(read(path))
        return between(t, start, chars) if start else head(t, chars)
    return f


def part_files(paths, chars):
    return lambda: head("\n\n".join(clean(read(p)) for p in paths), chars)


def part_rust(path, chars):
    return lambda: head(rust(path), chars)


def part_tab(path, chars, start):
    return lambda: between(tab_rows(path), start, chars)


def part_heads(pieces):
    """The start of each (path, chars) piece, joined by blank lines."""
    return lambda: "\n\n".join(head(read(p), n) for p, n in pieces)


def parts(refs):
    M = MAN
    return [
        ("agent", part_chat("travel"), "own transcript `travel`; tool results from iso-codes 4.15.0 `iso_3166-1.json`, `iso_4217.json` and tzdata 2025b `zone1970.tab`", "CC0-1.0 (own); LGPL-2.1+ (iso-codes); public domain (tzdata)"),
        ("code-c", part_file("/usr/share/doc/nettle-dev/examples/rsa-encrypt.c", 2300, start="#if HAVE_CONFIG_H"), "nettle 3.8.1 `/usr/share/doc/nettle-dev/examples/rsa-encrypt.c` (Copyright (C) 2002 Niels Möller), from the line after its license header", "LGPL-3+ or GPL-2+"),
        ("lang-ja", part_man(f"{M}/ja/man5/login.defs.5.gz", 850, refs), "shadow 4.13 (package login) `/usr/share/man/ja/man5/login.defs.5.gz`", "BSD-3-Clause"),
        ("json", part_heads([(f"{NODEDOC}/path.json.gz", 2300), (f"{GO}/cmd/internal/test2json/testdata/issue29755.json", 1300)]),
         "Node.js 20.20.2 `/usr/share/doc/nodejs/api/path.json.gz` (the API docs as JSON), then JSON lines: Go 1.26.8 `src/cmd/internal/test2json/testdata/issue29755.json` (`go test -json` events)", "MIT (Node.js); BSD-3-Clause (Go)"),
        ("lang-de", part_man(f"{M}/de/man1/dpkg-split.1.gz", 2500, refs), "dpkg 1.21.22 `/usr/share/man/de/man1/dpkg-split.1.gz`", "GPL-2+"),
        ("code-rust", part_rust(f"{RUST}/core/char/decode.rs.html", 2500), "Rust 1.95.0 `library/core/src/char/decode.rs` (rust-docs `html/src/core/char/decode.rs.html`, line numbers dropped)", "MIT OR Apache-2.0"),
        ("numbers-tab", part_tab("/usr/share/zoneinfo/zone1970.tab", 1450, "AQ\t"), "tzdata 2025b `/usr/share/zoneinfo/zone1970.tab`, rows from `AQ` on, comments dropped", "public domain"),
        ("agent", part_chat("dev"), "own transcript `dev`; tool results from npm 11.19.1 `package.json`, `/var/lib/dpkg/status` (nodejs, ca-certificates) and the Go module cache (cobra, protobuf)", "CC0-1.0 (own); Artistic-2.0 (npm); the packages' own (dpkg status fields); Apache-2.0 (cobra), BSD-3-Clause (protobuf)"),
        ("lang-ko", part_man(f"{M}/ko/man1/pstree.1.gz", 900, refs), "psmisc 23.6 `/usr/share/man/ko/man1/pstree.1.gz`", "GPL-2+"),
        ("config", part_files(["/usr/lib/google-cloud-sdk/platform/gsutil/third_party/urllib3/pyproject.toml",
                               f"{GOMOD}/github.com/spf13/cobra@v1.10.2/.github/workflows/test.yml"], 2500),
         "urllib3 `pyproject.toml` (Google Cloud SDK `platform/gsutil/third_party/urllib3`), cobra v1.10.2 `.github/workflows/test.yml`", "MIT (urllib3); Apache-2.0 (cobra)"),
        ("code-js", part_file(f"{NPM}/lib/commands/dist-tag.js", 2650), "npm 11.19.1 `lib/commands/dist-tag.js`", "Artistic-2.0"),
        ("lang-fr", part_man(f"{M}/fr/man8/start-stop-daemon.8.gz", 2750, refs), "dpkg 1.21.22 `/usr/share/man/fr/man8/start-stop-daemon.8.gz`", "GPL-2+"),
        ("markdown", part_file(f"{NODEDOC}/readline.{MARKDOWN}", 2650), "Node.js 20.20.2 API docs, the `readline` page (Markdown, `/usr/share/doc/nodejs/api/`)", "MIT"),
        ("agent", part_chat("phone"), "own transcript `phone` (Chinese and English)", "CC0-1.0"),
        ("code-shell", part_file("/root/.pyenv/libexec/pyenv-versions", 2500), "pyenv 2.6.30 `libexec/pyenv-versions`", "MIT"),
        ("lang-zh", part_man(f"{M}/zh_TW/man5/passwd.5.gz", 1250, refs), "shadow 4.13 (package passwd) `/usr/share/man/zh_TW/man5/passwd.5.gz` (Traditional Chinese)", "GPL-2+"),
        ("numbers-csv", part_heads([("/usr/share/distro-info/debian.csv", 1300), ("/usr/share/distro-info/ubuntu.csv", 500)]), "distro-info-data 0.58+deb12u6 `/usr/share/distro-info/debian.csv` and the start of `ubuntu.csv`", "ISC"),
        ("code-sql", part_file(f"{PG}/information_schema.sql", 2650, start="CREATE VIEW attributes AS"), "PostgreSQL 15.18 `/usr/share/postgresql/15/information_schema.sql`, from the view `attributes`", "PostgreSQL"),
        ("agent", part_chat("files"), "own transcript `files` (German); region results from iso-codes 4.15.0 `iso_3166-2.json`", "CC0-1.0 (own); LGPL-2.1+ (iso-codes)"),
        ("lang-ru", part_man(f"{M}/ru/man1/fuser.1.gz", 1400, refs), "psmisc 23.6 `/usr/share/man/ru/man1/fuser.1.gz`", "GPL-2+"),
    ]


# ---- disjointness

def shingles(t):
    w = t.split()
    words = {tuple(w[i:i + WORDS]) for i in range(len(w) - WORDS + 1)}
    c = "".join(t.split())  # CJK text has no spaces; man pages wrap it anywhere
    cjk = {c[i:i + CJK_RUN] for i in range(len(c) - CJK_RUN + 1) if CJK.search(c, i, i + CJK_RUN)}
    return words, cjk


def shared(t, refs):
    """The runs of t shared with refs (shingles() of the references)."""
    words, cjk = shingles(t)
    return sorted(" ".join(x) for x in words & refs[0]) + sorted(cjk & refs[1])


def disjoint_paragraphs(t, refs):
    return "\n\n".join(p for p in t.split("\n\n") if not shared(p, refs))


def load_refs():
    words, cjk = set(), set()
    for p in REFS:
        w, c = shingles(read(p))
        words |= w
        cjk |= c
    return words, cjk


# ---- output

def samples_of(path):
    return re.split(r"\n---\n", read(path).rstrip("\n"))


def check(paths):
    refs = load_refs()
    bad = 0
    for path in paths:
        for i, s in enumerate(samples_of(path), 1):
            for run in shared(s, refs):
                print(f"{path}: sample {i} shares {run!r}", file=sys.stderr)
                bad += 1
    return bad


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--check":
        bad = check(sys.argv[2:])
        print(f"real_heldout_agent.py: {bad} shared runs ({WORDS} words, {CJK_RUN} chars with CJK) in {' '.join(sys.argv[2:])}")
        sys.exit(1 if bad else 0)
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    refs = load_refs()
    out = []
    for kind, text, source, lic in parts(refs):
        t = text()
        if any(l.strip() == "---" for l in t.split("\n")):
            sys.exit(f"real_heldout_agent.py: {kind} ({source}) holds a line that is only ---")
        runs = shared(t, refs)
        if runs:
            sys.exit(f"real_heldout_agent.py: {kind} ({source}) shares {runs[:5]} with the references")
        out.append((kind, t))
    write(os.path.join(sys.argv[1], "heldout-agent.txt"), "\n---\n".join(t for _, t in out) + "\n")
    write(os.path.join(sys.argv[1], "heldout-agent-ci.txt"), "\n---\n".join(ci_slice(out)) + "\n")
    for i, (kind, t) in enumerate(out, 1):
        print(f"{i}\t{kind}\t{len(t)}")


# The CI slice: (kind, which part of that kind, the line it starts at or
# None for the part's start, characters), each cut at a line end.
CI = [("agent", 0, None, 2600), ("agent", 2, "<|im_start|>user", 2000), ("json", 0, None, 600),
      ("config", 0, None, 500), ("code-c", 0, None, 500), ("code-js", 0, None, 400),
      ("numbers-tab", 0, None, 400), ("lang-ja", 0, None, 250), ("lang-de", 0, None, 500),
      ("markdown", 0, None, 600)]


def ci_slice(out):
    pieces = []
    for kind, n, start, chars in CI:
        t = [t for k, t in out if k == kind][n]
        pieces.append(between(t, start, chars) if start else head(t, chars))
    return pieces


def write(path, text):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


if __name__ == "__main__":
    main()
