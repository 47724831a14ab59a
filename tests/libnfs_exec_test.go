package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLibnfsCopyThenExec: a program a stock client (libnfs's nfs-cp) wrote
// through the server runs on the server's machine once the file is idle
// for a moment: the server gives up its read-write descriptor of the file
// (store/idlewrite.go). Kept, exec(2) failed with ETXTBSY ("Text file
// busy") for as long as the server cached it.
func TestLibnfsCopyThenExec(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	cp := requireTool(t, "nfs-cp")
	e := newEnv(t, "rw,no_root_squash")
	src := filepath.Join(diskTempDir(t, "snfs-src-"), "prog")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho built elsewhere\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := command(cp, src, libnfsURL(e, e.dir+"/prog")).CombinedOutput(); err != nil {
		t.Fatalf("nfs-cp in: %v\n%s", err, out)
	}
	if err := os.Chmod(e.path("prog"), 0o755); err != nil { // nfs-cp does not copy the mode
		t.Fatal(err)
	}
	start := time.Now()
	for {
		out, err := command(e.path("prog")).CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "built elsewhere" {
			t.Logf("ran on the server %v after the copy", time.Since(start).Round(time.Millisecond))
			return
		}
		if err == nil || !strings.Contains(err.Error(), "text file busy") || time.Since(start) > 15*time.Second {
			t.Fatalf("the copied program, run on the server %v after the copy: %q, %v", time.Since(start).Round(time.Millisecond), out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
