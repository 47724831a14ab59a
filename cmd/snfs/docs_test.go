package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeListsServeFlags runs the real binary's `snfs serve -h` and
// checks that the README's flag table lists every flag it prints, and no
// other, and that docs/serve.md describes each one.
func TestReadmeListsServeFlags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "snfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	help, err := exec.Command(bin, "serve", "-h").Output()
	if err != nil {
		t.Fatalf("snfs serve -h: %v", err)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(string(help), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) < 10 {
		t.Fatalf("snfs serve -h lists %d flags, %q: not the usage this test parses:\n%s", len(flags), flags, help)
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The table under "## `snfs serve` flags": its first column is
	// "`--name VALUE`" or "`--name`".
	_, section, ok := strings.Cut(string(readme), "\n## `snfs serve` flags\n")
	if !ok {
		t.Fatal("README.md has no \"## `snfs serve` flags\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)[ `]").FindAllStringSubmatch(section, -1) {
		listed = append(listed, m[1])
	}
	for _, f := range flags {
		if !slices.Contains(listed, f) {
			t.Errorf("README.md's table of snfs serve flags lacks --%s", f)
		}
	}
	for _, f := range listed {
		if !slices.Contains(flags, f) {
			t.Errorf("README.md's table of snfs serve flags lists --%s, which snfs serve does not have", f)
		}
	}

	serveDoc, err := os.ReadFile("../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flags {
		if !regexp.MustCompile("`--" + regexp.QuoteMeta(f) + "[ `=]").Match(serveDoc) {
			t.Errorf("docs/serve.md does not describe --%s", f)
		}
	}
}
