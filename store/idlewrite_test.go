package store

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestIdleWriteExec: a program written through the store (a file it
// created, and one it opened for writing) runs on this machine once the
// file is idle: its writable descriptor is flushed and closed (and the
// created file's own made O_PATH) after writeIdle, where before exec(2)
// failed with ETXTBSY for as long as the descriptor was cached. Writing
// again afterwards opens the file again and the data is right. Without
// OnFlushFail's function the descriptors are kept.
func TestIdleWriteExec(t *testing.T) {
	s, root, exp := newTestExport(t)
	if err := os.WriteFile(filepath.Join(exp, "old"), []byte("#!/bin/sh\necho old\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var verf [8]byte
	if _, err := s.Create(root, "new", 0o755, CreateUnchecked, verf); err != nil {
		t.Fatal(err)
	}
	write := func(name, script string) {
		t.Helper()
		n := resolveChild(t, s, root, name) // attrcache_test.go
		defer n.Release()
		if err := s.OpenIO(n); err != nil {
			t.Fatal(err)
		}
		if err := s.Truncate(n, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteAt(n, []byte(script), 0); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string) (string, error) {
		out, err := exec.Command(filepath.Join(exp, name)).Output()
		return strings.TrimSpace(string(out)), err
	}
	write("new", "#!/bin/sh\necho new\n")
	write("old", "#!/bin/sh\necho rewritten\n")
	// Kept without a function to tell a failed flush to.
	time.Sleep(writeIdle + time.Second)
	for _, name := range []string{"new", "old"} {
		if _, err := run(name); !errors.Is(err, unix.ETXTBSY) {
			t.Fatalf("exec of %s with no OnFlushFail: %v; want ETXTBSY (the writable descriptor kept)", name, err)
		}
	}
	var fails atomic.Int32
	s.OnFlushFail(func(error) { fails.Add(1) })
	runs := func(name, want string) {
		t.Helper()
		deadline := time.Now().Add(3*writeIdle + 2*time.Second)
		for {
			out, err := run(name)
			if err == nil && out == want {
				return
			}
			if !errors.Is(err, unix.ETXTBSY) || time.Now().After(deadline) {
				t.Fatalf("exec of %s: %q, %v; want %q once idle for %v", name, out, err, want, writeIdle)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	runs("new", "new")
	runs("old", "rewritten")
	// Written again: opened again, then given up again.
	write("new", "#!/bin/sh\necho again\n")
	runs("new", "again")
	if n := fails.Load(); n != 0 {
		t.Fatalf("%d flushes failed", n)
	}
}

// TestIdleWriteFallback: while a program runs on this machine, the store's
// open of it for writing is refused (ETXTBSY) and OpenIO falls back to a
// read-only descriptor, so a WRITE fails (EROFS); once the program ends,
// the next WRITE opens it for writing again and is written (before, the
// read-only descriptor refused every WRITE for as long as it stayed
// cached).
func TestIdleWriteFallback(t *testing.T) {
	s, root, exp := newTestExport(t)
	s.OnFlushFail(func(err error) { t.Errorf("a flush failed: %v", err) })
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	prog, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "prog"), prog, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(exp, "prog"), "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	write := func() error {
		n := resolveChild(t, s, root, "prog") // attrcache_test.go
		defer n.Release()
		if err := s.OpenIO(n); err != nil {
			t.Fatal(err)
		}
		_, err := s.WriteAt(n, []byte("x"), int64(len(prog)))
		return err
	}
	if err := write(); !errors.Is(err, unix.EROFS) {
		t.Fatalf("WRITE to a program running here: %v; want EROFS", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(3*writeIdle + 2*time.Second)
	for {
		err := write()
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EROFS) || time.Now().After(deadline) {
			t.Fatalf("WRITE once the program ended: %v; want it written within %v", err, 3*writeIdle)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fi, err := os.Stat(filepath.Join(exp, "prog")); err != nil || fi.Size() != int64(len(prog))+1 {
		t.Fatalf("the program file after the WRITE: %v, %v", fi, err)
	}
}
