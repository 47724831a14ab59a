package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/mount/cachemgr"
	"snfs/server"
	"snfs/snfs1"
	"snfs/store"

	"golang.org/x/sys/unix"
)

// The durability of the data of files made locally (--permit-data=on;
// docs/mount.md "The data of a regular file made locally stays local",
// "Durability"): a STORE left in the log by a failed batch never lands
// over newer data, and a directory's fsync fails (EIO) while the data is
// not on the server.

// refusingDisk is the server's data flush (server.Config.Sync) failing
// with EIO, while on, the flushes of a regular file of bad's size: a
// server whose disk refuses to make those bytes durable (a REINTEGRATE
// batch whose STORE wrote them, a WRITE of them), and only those (the
// tests' other data has other sizes).
type refusingDisk struct {
	on  atomic.Bool
	bad []byte
}

func (rd *refusingDisk) sync(n *store.Node, dataOnly bool) error {
	if rd.on.Load() && n.Stat.Mode&syscall.S_IFMT == syscall.S_IFREG {
		// By its size: reading it would open it, which the server's
		// leases take for a local process's open (a callback).
		var st unix.Stat_t
		if unix.Fstat(n.FD(), &st) == nil && st.Size == int64(len(rd.bad)) {
			return syscall.EIO
		}
	}
	return store.SyncNode(n, dataOnly)
}

// permitsDurableMount is a --permit-data mount of e whose log is sent only
// when the test asks, with d's permit held (a directory made locally
// shows it: the first changes may go through the server while the server
// verifies the callback path).
func permitsDurableMount(t *testing.T, e *env, name string) *snfsMount {
	t.Helper()
	m := newPermitDataMountClose(t, e, name, "", 0)
	if !cachemgr.SetLogPolicy(m.v, time.Hour, 1<<20) {
		t.Fatal("no modification log")
	}
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	for k := 0; logRecords(m) == 0; k++ {
		if k == 100 {
			t.Fatal("no directory made locally: d's permit never held")
		}
		if err := os.Mkdir(m.path(fmt.Sprintf("d/sub%d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return m
}

// logRecords is the number of records in m's modification log.
func logRecords(m *snfsMount) int {
	st, _ := cachemgr.StatusOf(m.v, 0)
	return st.ModLog.Records
}

// TestMountSNFSPermitsDataStoreLeftInLog: a small file made locally is
// logged as CML_STORE at the reintegration, in the batch after the one
// that makes the file; that batch fails (the server cannot flush it), so
// the STORE stays in the log with the file made. The file is written
// again through a descriptor still open (its local data) and fsync'd;
// another mount's open of it calls the mount back, then the directory's
// fsync sends the log once the server can flush again. The server ends
// with the newer data (the STORE's older data never lands after it).
func TestMountSNFSPermitsDataStoreLeftInLog(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	old, newer := []byte("older data, logged as a STORE"), []byte("newer data, written after the STORE was logged")
	rd := &refusingDisk{bad: old}
	e, _ := keptEnv(t, func(c *server.Config) { c.Sync = rd.sync })
	permitsPre(t, e.path)
	m := permitsDurableMount(t, e, "permits-durable-store")
	f, err := os.OpenFile(m.path("d/victim"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(old); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}()
	if err := f.Close(); err != nil { // a FLUSH: the file counts as closed
		t.Fatal(err)
	}
	// The file's CREATE ends the first batch (symbolic links log no
	// data); its STORE, appended at the reintegration, goes alone in the
	// second.
	for k := 0; logRecords(m) < snfs1.ReintegrateMax; k++ {
		if err := os.Symlink("t", m.path(fmt.Sprintf("d/l%d", k))); err != nil {
			t.Fatal(err)
		}
	}
	if n := logRecords(m); n != snfs1.ReintegrateMax {
		t.Fatalf("%d records logged; want %d", n, snfs1.ReintegrateMax)
	}
	rd.on.Store(true)
	d, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err == nil {
		t.Fatal("the directory's fsync succeeded with the STORE's batch failing")
	}
	if n := logRecords(m); n != 1 {
		t.Fatalf("%d records left after the failed batch; want the STORE alone", n)
	}
	if _, err := syscall.Pwrite(fd, newer, 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fsync(fd); err != nil {
		t.Fatalf("fsync of the file (durable in the cache directory): %v", err)
	}
	b := newSNFSMount(t, e, "permits-durable-store-b", "", time.Hour)
	if _, err := os.ReadFile(b.path("d/victim")); err != nil { // calls the maker back
		t.Fatal(err)
	}
	rd.on.Store(false)
	if err := syscall.Close(fd); err != nil {
		t.Fatal(err)
	}
	fd = -1
	if err := d.Sync(); err != nil {
		t.Fatalf("the directory's fsync once the server flushes: %v", err)
	}
	if got, err := os.ReadFile(e.path("d/victim")); err != nil || !bytes.Equal(got, newer) {
		t.Errorf("the server's d/victim: %q, %v; want the newer data %q", got, err, newer)
	}
	if got, err := os.ReadFile(m.path("d/victim")); err != nil || !bytes.Equal(got, newer) {
		t.Errorf("the mount reads d/victim: %q, %v; want the newer data %q", got, err, newer)
	}
}

// TestMountSNFSPermitsDataPushFails: a file made locally, too large for a
// STORE, whose WRITEs after the reintegration fail (the server cannot
// flush them): the directory's fsync fails with EIO; once the server can
// flush, the next directory's fsync (its log empty) writes the data and
// succeeds, and the server has every byte.
func TestMountSNFSPermitsDataPushFails(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	data := bytes.Repeat([]byte("pushed by WRITE;"), 3*snfs1.StoreMax/16)
	rd := &refusingDisk{bad: data}
	e, _ := keptEnv(t, func(c *server.Config) { c.Sync = rd.sync })
	permitsPre(t, e.path)
	m := permitsDurableMount(t, e, "permits-durable-push")
	if err := os.WriteFile(m.path("d/big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	rd.on.Store(true)
	d, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the directory's fsync with the data's WRITEs failing: %v; want EIO", err)
	}
	if n := logRecords(m); n != 0 {
		t.Fatalf("%d records left; want the log sent", n)
	}
	rd.on.Store(false)
	if err := d.Sync(); err != nil {
		t.Fatalf("the directory's fsync once the server flushes: %v", err)
	}
	if got, err := os.ReadFile(e.path("d/big")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the server's d/big: %d bytes, %v; want %d", len(got), err, len(data))
	}
	if got, err := os.ReadFile(m.path("d/big")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the mount reads d/big: %d bytes, %v; want %d", len(got), err, len(data))
	}
}
