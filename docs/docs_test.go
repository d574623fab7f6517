// Package docs holds the user documentation (Markdown pages) and the test
// that keeps it, README.md and the code's citations standing alone: a clone
// of the repository has nothing outside it.
package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root, seen from this package.
const root = ".."

// self is this file, which names the references it refuses.
var self = filepath.Join(root, "docs", "docs_test.go")

// outside are references to files a clone does not have.
var outside = []string{"../shared", "shared/spec", "shared/golden", "shared/tokenizers", "/work/"}

var (
	// mdLink is an inline Markdown link or image: [text](target).
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	// mdCite is a citation of a Markdown file in code: a path ending in
	// .md, with an optional #anchor.
	mdCite = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md(#[A-Za-z0-9_-]+)?`)
	// url is a web address, whose path is not a citation of a repo file.
	url = regexp.MustCompile(`[a-z]+://\S+`)
	// codeSpan is inline code in Markdown, whose text is not a link.
	codeSpan = regexp.MustCompile("`[^`]*`")
)

// TestDocsStandAlone checks that every relative link of every Markdown page
// of the repository resolves to a file (and, with #anchor, to a heading of
// that page), that every Markdown file a page, a Go or a Python source
// names exists in the repository (and its anchor too), and that no page,
// source or test refers to ../shared or other files outside the
// repository.
func TestDocsStandAlone(t *testing.T) {
	pages, sources := repoFiles(t)
	anchors := map[string]map[string]bool{}
	for _, p := range pages {
		anchors[p] = headingAnchors(t, p)
	}
	resolve := func(from, target string) string {
		file, anchor, _ := strings.Cut(target, "#")
		path := from
		if file != "" {
			path = filepath.Clean(filepath.Join(filepath.Dir(from), file))
		}
		if _, err := os.Stat(path); err != nil {
			return "no file " + rel(path)
		}
		if anchor == "" || !strings.HasSuffix(path, ".md") {
			return ""
		}
		a, ok := anchors[path]
		if !ok {
			a = headingAnchors(t, path)
		}
		if !a[anchor] {
			return "no heading #" + anchor + " in " + rel(path)
		}
		return ""
	}
	for _, p := range pages {
		for n, line := range proseLines(t, p) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				if why := resolve(p, target); why != "" {
					t.Errorf("%s:%d: link %s: %s", rel(p), n+1, target, why)
				}
			}
		}
	}
	for _, p := range pages {
		for n, line := range readLines(t, p) {
			prose := mdLink.ReplaceAllString(url.ReplaceAllString(line, ""), "") // links are checked above
			for _, m := range mdCite.FindAllString(prose, -1) {
				if why := citeResolves(p, m, resolve); why != "" && !namesFileBelow(pages, p, m) {
					t.Errorf("%s:%d: names %s: %s", rel(p), n+1, m, why)
				}
			}
		}
	}
	for _, src := range sources {
		for n, line := range readLines(t, src) {
			for _, m := range mdCite.FindAllString(url.ReplaceAllString(line, ""), -1) {
				if why := citeResolves(src, m, resolve); why != "" {
					t.Errorf("%s:%d: cites %s: %s", rel(src), n+1, m, why)
				}
			}
		}
	}
	for _, f := range append(pages, sources...) {
		for n, line := range readLines(t, f) {
			for _, bad := range outside {
				if strings.Contains(line, bad) && f != self && !listsOutside(line) {
					t.Errorf("%s:%d: refers to %q, which a clone does not have", rel(f), n+1, bad)
				}
			}
		}
	}
}

// listsOutside reports whether a line is a test's own list of refused
// references (a Go string literal of one of them), not a reference.
func listsOutside(line string) bool {
	for _, bad := range outside {
		if strings.Contains(line, `"`+bad+`"`) {
			return true
		}
	}
	return false
}

// namesFileBelow reports whether a page's bare file name is the name of a
// page that several of its folder's subfolders each hold (a README
// describing the SOURCE.md every folder has), not of one page elsewhere.
func namesFileBelow(pages []string, page, name string) bool {
	if strings.ContainsAny(name, "/#") {
		return false
	}
	dir := filepath.Dir(page)
	n := 0
	for _, p := range pages {
		if filepath.Base(p) == name && filepath.Dir(filepath.Dir(p)) == dir {
			n++
		}
	}
	return n >= 2
}

// citeResolves resolves a citation in a source file: relative to the
// repository root (docs/qnn.md), or to the citing file's folder.
func citeResolves(src, cite string, resolve func(from, target string) string) string {
	why := resolve(filepath.Join(root, "x"), cite)
	if why == "" {
		return ""
	}
	if resolve(src, cite) == "" {
		return ""
	}
	return why
}

// repoFiles lists the Markdown pages and the Go and Python sources of the
// repository, skipping hidden folders, virtual environments and
// node_modules.
func repoFiles(t *testing.T) (pages, sources []string) {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "demo") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".md":
			pages = append(pages, path)
		case ".go", ".py":
			if path != self {
				sources = append(sources, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 5 || len(sources) < 100 {
		t.Fatalf("found %d pages and %d sources: not the repository", len(pages), len(sources))
	}
	return pages, sources
}

// readLines returns a file's lines.
func readLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// proseLines returns a page's lines with fenced code blocks blanked and
// inline code removed, so only real links remain.
func proseLines(t *testing.T, path string) []string {
	lines := readLines(t, path)
	out := make([]string, len(lines))
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out[i] = codeSpan.ReplaceAllString(l, "")
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives a page's headings:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func headingAnchors(t *testing.T, path string) map[string]bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := slug(text)
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// slug is GitHub's heading anchor of text.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// rel names a path from the repository root.
func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}

// TestSlug pins the anchor rule on headings of these pages.
func TestSlug(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"GPTQ W4A8", "gptq-w4a8"},
		{"vLLM's CPU path", "vllms-cpu-path"},
		{"manifest.json", "manifestjson"},
		{"What onnx.checker enforces", "what-onnxchecker-enforces"},
		{"Simulation and the 20 dB bar", "simulation-and-the-20-db-bar"},
		{"`full` eval run", "full-eval-run"},
	} {
		if got := slug(c.in); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
