package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestDocsStandAlone: no README or help text points at files outside the
// repository.
func TestDocsStandAlone(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{"README.md": string(readme)}
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
	}
}
