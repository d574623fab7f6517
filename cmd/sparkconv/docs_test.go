package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// helpCite is a citation of a repository file in help text.
var helpCite = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md(#[A-Za-z0-9_-]+)?`)

// TestHelpStandAlone: no help text points at files outside the repository,
// and every Markdown page it cites is one of the repository's (the
// repository's pages and sources are checked by package docs'
// TestDocsStandAlone).
func TestHelpStandAlone(t *testing.T) {
	texts := map[string]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		texts[c.CommandPath()] = c.Use + c.Short + c.Long + c.Example + c.Flags().FlagUsages()
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(rootCmd)
	for where, text := range texts {
		for _, bad := range []string{"../shared", "shared/spec", "shared/golden", "shared/tokenizers", "/work/"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s refers to %q, which a clone does not have", where, bad)
			}
		}
		for _, c := range helpCite.FindAllString(text, -1) {
			file, _, _ := strings.Cut(c, "#")
			if _, err := os.Stat(filepath.Join("../..", file)); err != nil {
				t.Errorf("%s cites %s, which the repository does not have", where, c)
			}
		}
	}
}
