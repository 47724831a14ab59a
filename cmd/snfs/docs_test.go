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

// TestMountHelpMatchesDocs runs the real binary's `snfs mount -h` and checks
// it against docs/mount.md's table of flags and -o options: every flag it
// prints is in the table, every -o name of the table is in the -o flag's own
// line and in the synopsis, and mount(8)'s helper takes each of them (-f:
// check the options, mount nothing).
func TestMountHelpMatchesDocs(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "snfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	helpOut, _ := exec.Command(bin, "mount", "-h").CombinedOutput()
	help := string(helpOut)
	synopsis, flagList, ok := strings.Cut(help, "\nflags:\n")
	if !ok {
		t.Fatalf("snfs mount -h has no flags: section:\n%s", help)
	}
	if strings.Contains(synopsis, "(as root)") || !strings.Contains(synopsis, "fusermount3") {
		t.Errorf("snfs mount -h says it needs root, or not how another user mounts:\n%s", synopsis)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(flagList, -1) {
		flags = append(flags, m[1])
	}
	oLine := regexp.MustCompile(`(?m)^  -o string\n\s+(.*)$`).FindStringSubmatch(flagList)
	if len(flags) < 10 || oLine == nil {
		t.Fatalf("snfs mount -h lists %d flags, %q, and -o as %q: not the usage this test parses:\n%s", len(flags), flags, oLine, help)
	}

	doc, err := os.ReadFile("../../docs/mount.md")
	if err != nil {
		t.Fatal(err)
	}
	var tableFlags, opts, helpOpts []string // helpOpts: each row's first -o name, not its aliases
	for _, m := range regexp.MustCompile("(?m)^\\| (`--[^|]*)?\\| ([^|]*)\\|").FindAllStringSubmatch(string(doc), -1) {
		for _, f := range regexp.MustCompile("`--([a-z-]+)").FindAllStringSubmatch(m[1], -1) {
			tableFlags = append(tableFlags, f[1])
		}
		if m[1] == "" && !strings.Contains(m[2], "noexec") {
			continue // another table's row
		}
		for i, o := range regexp.MustCompile("`([a-z-]+)[=\\[`]").FindAllStringSubmatch(m[2], -1) {
			opts = append(opts, o[1])
			if i == 0 {
				helpOpts = append(helpOpts, o[1])
			}
		}
	}
	if len(opts) < 15 {
		t.Fatalf("docs/mount.md's table of flags gives %d -o options, %q: not the table this test parses", len(opts), opts)
	}
	for _, f := range flags {
		if f != "o" && !slices.Contains(tableFlags, f) {
			t.Errorf("docs/mount.md's table of flags lacks --%s", f)
		}
	}
	word := func(s, w string) bool {
		return regexp.MustCompile(`(^|[^a-z-])` + regexp.QuoteMeta(w) + `($|[^a-z-])`).MatchString(s)
	}
	mountHelper := filepath.Join(tmp, "mount.snfs")
	if err := os.Symlink(bin, mountHelper); err != nil {
		t.Fatal(err)
	}
	values := map[string]string{"nfs-port": "=2049", "port": "=2049", "mount-port": "=20048", "mountport": "=20048",
		"mode": "=snfs", "cache-dir": "=" + tmp, "cache-size": "=1G", "writeback-delay": "=5s", "metrics": "=127.0.0.1:0",
		"close-delay": "=1s", "kept-opens": "=100", "disconnected": "=auto", "disconnect-after": "=5s", "permits": "=off", "passthrough": "=false", "log-file": "=" + filepath.Join(tmp, "log"), "log-level": "=debug",
		"locks": "=local", "nlm-port": "=2049", "rpcbind-port": "=111"}
	for _, o := range helpOpts {
		if !word(oLine[1], o) {
			t.Errorf("snfs mount -h: -o's line lacks %s: %s", o, oLine[1])
		}
		if !word(synopsis, o) {
			t.Errorf("snfs mount -h: the synopsis lacks -o %s", o)
		}
	}
	for _, o := range opts {
		opt := o + values[o]
		if out, err := exec.Command(mountHelper, "127.0.0.1:/srv/share", tmp, "-f", "-o", opt).CombinedOutput(); err != nil {
			t.Errorf("mount.snfs -f -o %s: %v: %s", opt, err, out)
		}
	}
	if out, err := exec.Command(mountHelper, "127.0.0.1:/srv/share", tmp, "-f", "-o", "log-level=loud").CombinedOutput(); err == nil ||
		string(out) != "snfs: --log-level: want debug, info, warn or error, not \"loud\"\n" {
		t.Errorf("mount.snfs -f -o log-level=loud: %v: %q", err, out)
	}
}
