package tests

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"snfs/metrics"
	"snfs/server"
)

// TestMountSNFSKeptOpenAccess: an open served by a kept open sends no OPEN,
// so the server checks nothing; the mount's access cache (mount/cachemgr
// accesscache.go) answers for a credential the server answered before (or
// that created the file) and asks the server (ACCESS) for another. Under
// root_squash the kernel lets root open anything (default_permissions), the
// server does not: root's open of another user's 0600 file that this mount
// holds a kept write open of must fail EACCES (else root writes, close says
// yes, and the write-back as squashed root is refused: acknowledged bytes
// lost). The server checks an OPEN as the application's user (before, as
// the mount's root: under root_squash a user could not open its own file
// for writing). And reopening, read-write, files this mount created costs
// no call.
func TestMountSNFSKeptOpenAccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	os.Chmod(e.dir, 0o755)
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(e.path("d"), 0o777)
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(e.path("d/f"), 65533, 65533); err != nil {
		t.Fatal(err)
	}
	m := newSNFSMountKept(t, e, "A", 0, 0)
	f := filepath.Join(m.dir, "d/f")

	// The owner's write open, kept after its close.
	if err := runAsUser(t, 65533, 65533, func() error { return openClose(f, os.O_WRONLY) }); err != nil {
		t.Fatal(err)
	}
	for _, flags := range []int{os.O_WRONLY, os.O_RDWR, os.O_RDONLY, os.O_WRONLY | os.O_APPEND} {
		if err := openClose(f, flags); !errors.Is(err, syscall.EACCES) {
			t.Errorf("squashed root's open (flags %#x) of another user's 0600 file held in a kept open: %v; want EACCES", flags, err)
		}
	}
	if err := runAsUser(t, 65533, 65533, func() error { return openClose(f, os.O_RDWR) }); err != nil {
		t.Errorf("the owner's O_RDWR open: %v", err)
	}
	// The server checks an OPEN as the application's user, not as the
	// mount (root, squashed): a user creates and writes a file of its own.
	if err := runAsUser(t, 65533, 65533, func() error {
		return os.WriteFile(filepath.Join(m.dir, "d/mine"), []byte("mine"), 0o600)
	}); err != nil {
		t.Errorf("a user's create under root_squash: %v", err)
	}
	if b, err := os.ReadFile(e.path("d/f")); err != nil || string(b) != "x" {
		t.Errorf("the server's file: %q, %v; want it unchanged", b, err)
	}

	// Files root created here (owned by the squashed identity): reopened
	// read-write and read-only without a call.
	var names []string
	for _, n := range []string{"a", "b", "c"} {
		p := filepath.Join(m.dir, "d", n)
		if err := os.WriteFile(p, []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
	}
	before := serverCalls(t, reg, "ACCESS") + serverCalls(t, reg, "OPEN") + serverCalls(t, reg, "GETATTR")
	for range 2 {
		for _, p := range names {
			for _, flags := range []int{os.O_RDWR, os.O_RDONLY, os.O_WRONLY} {
				if err := openClose(p, flags); err != nil {
					t.Fatalf("reopen %s (flags %#x): %v", p, flags, err)
				}
			}
		}
	}
	if n := serverCalls(t, reg, "ACCESS") + serverCalls(t, reg, "OPEN") + serverCalls(t, reg, "GETATTR") - before; n != 0 {
		t.Errorf("reopening files this mount created sent %v ACCESS, OPEN or GETATTR calls; want 0", n)
	}
}
