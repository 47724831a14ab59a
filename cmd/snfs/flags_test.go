package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		port int
		pos  []string
	}{
		{[]string{"/a", "/b"}, 0, []string{"/a", "/b"}},
		{[]string{"--nfs-port", "2049", "/a"}, 2049, []string{"/a"}},
		{[]string{"/a", "--nfs-port", "2049"}, 2049, []string{"/a"}},
		{[]string{"/a", "-nfs-port=7", "/b", "--bind", "x"}, 7, []string{"/a", "/b"}},
		{[]string{"/a", "--", "--nfs-port", "/b"}, 0, []string{"/a", "--nfs-port", "/b"}},
		{[]string{"--", "-x"}, 0, []string{"-x"}},
		{nil, 0, nil},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		port := fs.Int("nfs-port", 0, "")
		fs.String("bind", "", "")
		pos, err := parseArgs(fs, tc.args)
		if err != nil || *port != tc.port || !reflect.DeepEqual(pos, tc.pos) {
			t.Errorf("%q: port %d, positional %q, %v; want %d, %q", tc.args, *port, pos, err, tc.port, tc.pos)
		}
	}
}

// TestHelpAndVersion runs the real binary: -h prints the usage generated from the
// flag set (every flag of serve appears) and exits 0; an unknown flag exits 2;
// version prints a version line.
func TestHelpAndVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "snfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, h := range []string{"-h", "--help"} {
		var stderr strings.Builder
		cmd := exec.Command(bin, "serve", h)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("serve %s: %v", h, err)
		}
		if stderr.Len() != 0 {
			t.Errorf("serve %s wrote to stderr (the usage belongs on stdout, once):\n%s", h, stderr.String())
		}
		for _, f := range []string{"bind", "nfs-port", "mount-port", "exports", "export-options", "state-dir",
			"portmap-port", "metrics", "log-level", "write-gather", "write-gather-max-wait", "spin-poll"} {
			if !strings.Contains(string(out), "-"+f+" ") {
				t.Errorf("serve %s does not list -%s:\n%s", h, f, out)
			}
		}
	}
	if out, err := exec.Command(bin, "help").Output(); err != nil || !strings.Contains(string(out), "serve") {
		t.Errorf("help: %v %s", err, out)
	}
	err := exec.Command(bin, "serve", "--no-such-flag").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("unknown flag: %v, want exit 2", err)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "snfs ") || !strings.Contains(string(out), "go1.") {
		t.Errorf("version: %v %q", err, out)
	}
	_ = os.Remove(bin)
}
