package store

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// leaseStore is a store with one export holding the file f ("data"), and f's
// handle.
func leaseStore(t *testing.T) (*Store, string, []byte) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("leases on files of other owners need CAP_LEASE: run as root")
	}
	base := diskTempDir(t, "snfs-lease-")
	exp := filepath.Join(base, "export")
	if err := os.MkdirAll(exp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(base, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	e, err := s.AddExport(exp)
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.Resolve(e.Root)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Release()
	fh, _, err := s.Lookup(root, "f")
	if err != nil {
		t.Fatal(err)
	}
	return s, filepath.Join(exp, "f"), fh
}

// TestLeaseBreak: a local process's open of a leased file waits; the break
// is reported (for reading, for writing) and the open proceeds once the
// lease is released. The store's own I/O through its descriptor does not
// break it.
func TestLeaseBreak(t *testing.T) {
	s, path, fh := leaseStore(t)
	type brk struct {
		fh    string
		write bool
	}
	breaks := make(chan brk, 4)
	s.OnLeaseBreak(func(fh []byte, write bool) { breaks <- brk{string(fh), write} })
	for _, c := range []struct {
		what  string
		cmd   []string
		write bool
	}{
		{"cat", []string{"cat", path}, false},
		{"append", []string{"sh", "-c", "echo more >> " + path}, true},
	} {
		if err := s.Lease(fh); err != nil {
			t.Fatalf("%s: lease: %v", c.what, err)
		}
		n, err := s.Resolve(fh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteAt(n, []byte("DATA"), 0); err != nil {
			t.Fatalf("the store's own write under its lease: %v", err)
		}
		n.Release()
		if !s.Leased(fh) {
			t.Fatalf("%s: the store's own write broke its lease", c.what)
		}
		cmd := exec.Command(c.cmd[0], c.cmd[1:]...)
		done := make(chan error, 1)
		go func() { _, err := cmd.Output(); done <- err }()
		select {
		case b := <-breaks:
			if b.fh != string(fh) || b.write != c.write {
				t.Errorf("%s: break %+v, want write %v", c.what, b, c.write)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no break reported", c.what)
		}
		select {
		case err := <-done:
			t.Fatalf("%s: the local open went on before the lease was released (%v)", c.what, err)
		case <-time.After(100 * time.Millisecond):
		}
		s.Unlease(fh)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", c.what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the local open did not proceed after the release", c.what)
		}
	}
}

// TestLeaseHeldElsewhere: a file a local process has open cannot be leased.
func TestLeaseHeldElsewhere(t *testing.T) {
	s, path, fh := leaseStore(t)
	cmd := exec.Command("sh", "-c", "exec 3<"+path+"; echo open; read x")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := s.Lease(fh); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("lease of a file open elsewhere: %v, want ErrLeaseHeld", err)
	}
	if s.Leased(fh) {
		t.Fatal("recorded as leased")
	}
}
