package tests

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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

// TestMountSNFSRestartWriterRootSquash: dirty data a user wrote (an hour's
// write-back delay) and a mount killed with SIGKILL before writing it back;
// the remount reintegrates it as that user, recorded in the cache entry
// (cachedir's Writer), not as the mount's root, which root_squash makes the
// anonymous user: its OPEN and WRITEs of the user's 0644 file were refused
// and the acknowledged bytes never reached the server.
func TestMountSNFSRestartWriterRootSquash(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t, "--export-options", "rw,root_squash")
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(s.export, "d"), 0o777)
	m := startMount(t, s, "", "")
	data := bytes.Repeat([]byte("acknowledged "), 100000)
	if err := runAsUser(t, 65533, 65533, func() error { return os.WriteFile(m.path("d/f"), data, 0o644) }); err != nil {
		t.Fatal(err)
	}
	m.kill9()
	// A stat, not a read: a local read of the file would call the mount
	// back for its write-back (docs/protocol.md 14.1).
	if st, err := os.Stat(filepath.Join(s.export, "d/f")); err != nil || st.Size() != 0 {
		t.Fatalf("the server's file before the remount: %v, %v; want it empty (the data only in the cache: an hour's delay)", st, err)
	}
	m.launch(s, s.nfsPort, "--writeback-delay", "1h", "--log-level", "info", "--metrics", m.metrics)
	if !waitFor(20*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(s.export, "d/f"))
		return bytes.Equal(b, data)
	}) {
		b, _ := os.ReadFile(filepath.Join(s.export, "d/f"))
		t.Fatalf("after the remount the server has %d bytes of the %d the user's close acknowledged\n%s", len(b), len(data), tail(m.logPath, 20))
	}
	st, err := os.Stat(filepath.Join(s.export, "d/f"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 65533 {
		t.Errorf("the file is owned by %d; want the user 65533", sys.Uid)
	}
}

// TestMountSNFSKeptOpenOtherChmod: another client's chmod of a file this
// mount holds a kept write open of takes the kept open back (the server
// calls back the file's holders for a SETATTR of the mode or owner as for
// one of the size), so the next open here is checked against the new mode.
// Before, the kept open and its access cache answered from the old mode:
// a user the new mode shuts out opened the file for writing, close said
// yes, and the write-back was refused at the server.
func TestMountSNFSKeptOpenOtherChmod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,root_squash")
	os.Chmod(e.dir, 0o755)
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(e.path("d"), 0o777)
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(e.path("d/f"), 0o666)
	const owner, other = 65533, 65532
	if err := os.Chown(e.path("d/f"), owner, owner); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMountKept(t, e, "A", 0, 0)
	b := newSNFSMountKept(t, e, "B", 0, 0)
	fa := filepath.Join(a.dir, "d/f")

	// Another user writes the file on A (its mode lets everyone write),
	// and A keeps the write open past the close.
	if err := runAsUser(t, other, other, func() error { return os.WriteFile(fa, []byte("written by other"), 0) }); err != nil {
		t.Fatal(err)
	}
	// The owner takes write permission away on B.
	if err := runAsUser(t, owner, owner, func() error { return os.Chmod(filepath.Join(b.dir, "d/f"), 0o644) }); err != nil {
		t.Fatal(err)
	}
	if err := runAsUser(t, other, other, func() error { return openClose(fa, os.O_WRONLY) }); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("open for writing on A after B's chmod 0644 by the owner, as another user: %v; want EACCES", err)
	}
	if fi, err := os.Stat(fa); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("stat on A after B's chmod: %v, %v; want mode 0644", fi, err)
	}
	// What A acknowledged before the chmod reaches the server.
	if err := a.v.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(e.path("d/f")); err != nil || string(got) != "written by other" {
		t.Fatalf("the server's file: %q, %v; want what A's close acknowledged before the chmod", got, err)
	}
}

// TestMountSNFSSameModeChmodNoCallback: a chmod or chown to the values the
// file has already (tar, cp -p, rsync set them either way) changes nothing:
// the file's holders are not called back and keep caching. A real change
// calls them back (TestMountSNFSKeptOpenOtherChmod).
func TestMountSNFSSameModeChmodNoCallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	if err := os.WriteFile(e.path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(e.path("f"), 0o644)
	a := newSNFSMountKept(t, e, "A", 0, 0)
	b := newSNFSMountKept(t, e, "B", 0, 0)
	if err := os.WriteFile(filepath.Join(a.dir, "f"), []byte("cached on A"), 0); err != nil {
		t.Fatal(err)
	}
	callbacks := func() float64 {
		var n float64
		for _, m := range []string{"WRITEBACK", "INVALIDATE", "WRITEBACK_INVALIDATE", "RELINQUISH"} {
			n += metricValue(t, reg, "snfs_server_consist_callbacks_total", "mode", m)
		}
		return n
	}
	before := callbacks()
	fb := filepath.Join(b.dir, "f")
	if err := os.Chmod(fb, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(fb, 0, 0); err != nil {
		t.Fatal(err)
	}
	if n := callbacks() - before; n != 0 {
		t.Fatalf("a chmod and chown to the file's own mode and owner sent %v callbacks; want 0", n)
	}
	if err := os.Chmod(fb, 0o600); err != nil {
		t.Fatal(err)
	}
	if n := callbacks() - before; n == 0 {
		t.Fatalf("a chmod that changes the mode of a file A caches dirty sent no callback")
	}
}
