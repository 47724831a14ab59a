package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestVersionCommit builds the real binary from a git checkout of this
// repository and checks that `snfs version` (and --version, -V) names the
// commit it was built from, HEAD, and says "with uncommitted changes" exactly
// when the tree has some; built with -buildvcs=false it says the commit is
// unknown. go build records the commit only where .git is a directory (a
// clone, as the README's quick start has; not a git worktree, whose .git is
// a file: golang/go#58218): in a worktree the test builds in a clone of it
// at HEAD.
func TestVersionCommit(t *testing.T) {
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %q in %s: %v", args, dir, err)
		}
		return strings.TrimSpace(string(out))
	}
	top := git(".", "rev-parse", "--show-toplevel")
	head := git(top, "rev-parse", "HEAD")
	src := top
	if fi, err := os.Stat(filepath.Join(top, ".git")); err != nil || !fi.IsDir() {
		src = filepath.Join(t.TempDir(), "clone")
		git(".", "clone", "-q", "--no-checkout", top, src)
		git(src, "checkout", "-q", "--detach", head)
		t.Logf("%s is a git worktree, which go build does not stamp: building in a clone of it at HEAD", top)
	}
	dirty := git(src, "status", "--porcelain") != "" // what go build asks git
	build := func(vcs string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "snfs")
		// -buildvcs on the command line: GOFLAGS may say false.
		cmd := exec.Command("go", "build", "-buildvcs="+vcs, "-o", bin, "./cmd/snfs")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build in %s: %v\n%s", src, err, out)
		}
		return bin
	}
	tail := ", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	changes := ""
	if dirty {
		changes = " with uncommitted changes"
	}
	want := regexp.MustCompile(`^snfs v\S+, commit ` + head + ` of \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ` + changes + regexp.QuoteMeta(tail) + `$`)
	bin := build("true")
	for _, arg := range []string{"version", "--version", "-V"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil || !want.Match(out) {
			t.Errorf("snfs %s: %v %q, want it to match %s", arg, err, out, want)
		}
	}
	out, err := exec.Command(build("false"), "version").Output()
	if w := "snfs (devel), commit unknown (built outside a git clone, in a git worktree, or with -buildvcs=false)" + tail; err != nil || string(out) != w {
		t.Errorf("snfs version built with -buildvcs=false: %v %q, want %q", err, out, w)
	}
}
