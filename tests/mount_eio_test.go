package tests

import (
	"bytes"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/server"
	"snfs/store"
)

// EIO at write-back (issue 14: errors found at write-back surface on the
// next fsync or close, nothing is dropped silently). The server's disk
// cannot fail on demand, so its flush does (server.Config.Sync, the fault
// hook the write-gathering tests use): while failing is set, every flush of
// a regular file returns EIO, and the server answers the COMMIT (or stable
// WRITE) NFS3ERR_IO and changes its write verifier. Once the disk works
// again, the same data is still there to be written back.

// newEIOEnv serves a fresh export whose file flushes fail while the
// returned flag is set.
func newEIOEnv(t *testing.T) (*env, *atomic.Bool) {
	t.Helper()
	e := newEnv(t, "rw,no_root_squash")
	failing := new(atomic.Bool)
	e.restartWith(func(c *server.Config) {
		c.Sync = func(n *store.Node, dataOnly bool) error {
			if failing.Load() && n.Stat.Mode&syscall.S_IFMT == syscall.S_IFREG {
				return syscall.EIO
			}
			return store.SyncNode(n, dataOnly)
		}
	})
	return e, failing
}

// TestMountSNFSWriteBackEIO: snfs mode with an hour's write-back delay. The
// close of a written file returns at once (the data is in the cache
// directory); the fsync that writes it back while the server's flushes fail
// returns EIO; the next fsync, once they work, writes it back whole.
func TestMountSNFSWriteBackEIO(t *testing.T) {
	t.Parallel()
	e, failing := newEIOEnv(t)
	serverFiles(t, e, "f")
	m := newSNFSMount(t, e, "A", "", time.Hour)
	want := randBytes(71, 300000)
	if err := os.WriteFile(m.path("f"), want, 0o644); err != nil {
		t.Fatalf("write and close with an hour's delay: %v (want no error: the data is cached)", err)
	}
	failing.Store(true)
	fsyncErr, closeErr := reopenFsync(t, m.path("f"))
	if !errors.Is(fsyncErr, syscall.EIO) {
		t.Fatalf("fsync while the server's flushes fail: %v (close %v), want EIO", fsyncErr, closeErr)
	}
	failing.Store(false)
	if fsyncErr, closeErr := reopenFsync(t, m.path("f")); fsyncErr != nil || closeErr != nil {
		t.Fatalf("fsync once the server's flushes work: %v, close %v", fsyncErr, closeErr)
	}
	if got := mustRead(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("the export has %d bytes after the second fsync, want the %d written", len(got), len(want))
	}
}

// TestMountNFSWriteEIO: nfs mode flushes at close: the close returns EIO
// while the server's flushes fail (the application is told: the data is
// not kept for a later try, as the Linux client does not keep it either).
func TestMountNFSWriteEIO(t *testing.T) {
	t.Parallel()
	e, failing := newEIOEnv(t)
	m := newMount(t, e)
	failing.Store(true)
	err := os.WriteFile(m.dir+"/f", randBytes(72, 300000), 0o644)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("write and close while the server's flushes fail: %v, want EIO", err)
	}
}
