package cachemgr

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/internal/faultproxy"
	"snfs/mount/vfs"
	"snfs/state"
	"snfs/state/clientfile"
)

// The lease of kept opens (keptlease.go): a mount cut off from the server
// for longer than the callback timeout was fenced for the file another
// client wrote meanwhile; its kept open of the file must not serve the next
// application open from the cache once it is back.

// keptLeaseCBT is the server's callback timeout in these tests.
const keptLeaseCBT = time.Second

// keptLeaseSetup serves a file f holding old with a callback timeout of
// keptLeaseCBT; mount A reaches the server through the returned proxy,
// mount B directly, both keeping opens until recalled. A has read f whole
// and closed it: its open is kept (checked).
func keptLeaseSetup(t *testing.T, old []byte) (p *faultproxy.Proxy, a, b *vfs.FS, ia, ib *vfs.Inode) {
	t.Helper()
	s := newServer(t, false)
	s.stop()
	s.cbt = keptLeaseCBT
	s.start(s.addr)
	if err := os.WriteFile(filepath.Join(s.export, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() }) // after A's unmount (cleanups run last first)
	ctx := context.Background()
	mount := func(name, addr string) *vfs.FS {
		v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: s.export, Name: name,
			CacheDir: t.TempDir(), WriteBackDelay: time.Hour, CloseDelay: clientfile.UntilRecalled,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Heal()
			v.Sync(ctx)
			v.Close()
		})
		return v
	}
	a, b = mount("A", p.Addr()), mount("B", s.addr)
	pathVerified(t, a, "a-probe")
	pathVerified(t, b, "b-probe")
	lookup := func(v *vfs.FS) *vfs.Inode {
		e, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "f")
		if err != nil {
			t.Fatal(err)
		}
		return e.Inode
	}
	ia, ib = lookup(a), lookup(b)
	if got, err := openReadErr(a, ia); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("A's first read of f: %d bytes, %v; want the server's %d", len(got), err, len(old))
	}
	ia.Mu.Lock()
	kept := stOf(ia).Kept(state.Read)
	ia.Mu.Unlock()
	if kept != 1 {
		t.Fatalf("A keeps %d read opens of f after its close; want 1", kept)
	}
	return p, a, b, ia, ib
}

// openReadErr opens i for reading, reads it whole and closes it.
func openReadErr(v *vfs.FS, i *vfs.Inode) ([]byte, error) {
	ctx := context.Background()
	f, _, err := v.Open(ctx, i, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer v.Release(ctx, f)
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := v.Read(ctx, f, uint64(len(out)), buf)
		if err != nil {
			return out, fmt.Errorf("read: %w", err)
		}
		out = append(out, buf[:n]...)
		if n == 0 {
			return out, nil
		}
	}
}

// bWrites has B write f whole with data (O_TRUNC), fsync and close it. A
// being cut off, B's OPEN waits until the server's callback to A times out
// and fences A for f.
func bWrites(t *testing.T, b *vfs.FS, ib *vfs.Inode, data []byte) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	f, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_RDWR|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < keptLeaseCBT {
		t.Fatalf("B's open returned after %v, within the callback timeout: A was not called back (and fenced)", time.Since(start))
	}
	if _, err := b.Write(ctx, f, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := b.Fsync(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
}

// TestKeptOpenAfterPartition: A keeps an open of f and is cut off (its
// connection intact) for longer than the callback timeout while B writes
// f; the server fences A. The partition heals, but the callback the server
// sent A meanwhile is still on its way (A's answers and the server's
// messages to A are held a while longer). A's open of f then must not take
// its kept open over and read the cache: its lease lapsed during the
// partition, and the NULL that renews it is answered after that callback,
// which has taken the kept open (or, still being served, has it given back
// with CLOSE): A OPENs and reads B's bytes. Before the lease of kept opens,
// the open was served at once from the cache, with the old bytes.
func TestKeptOpenAfterPartition(t *testing.T) {
	old, theirs := []byte("A read these bytes before the partition"), []byte("B wrote these while A was cut off, longer")
	p, a, b, ia, ib := keptLeaseSetup(t, old)
	p.Stall(faultproxy.ClientToServer)
	p.Stall(faultproxy.ServerToClient)
	bWrites(t, b, ib, theirs)
	// The partition heals from A to the server; the server's messages to A
	// come later.
	p.Restore(faultproxy.ClientToServer)
	type read struct {
		data []byte
		err  error
	}
	got := make(chan read, 1)
	go func() {
		d, err := openReadErr(a, ia)
		got <- read{d, err}
	}()
	time.Sleep(300 * time.Millisecond)
	p.Restore(faultproxy.ServerToClient)
	select {
	case r := <-got:
		if r.err != nil || !bytes.Equal(r.data, theirs) {
			t.Fatalf("A reads f after the partition: %q, %v; want B's %q", r.data, r.err, theirs)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A's open and read of f did not end within 30 s of the partition's end")
	}
	// Either way is right: the NULL renewing the lease was answered after
	// the server's callback, which A had served by then (its kept open
	// handed back: CB_TREAT_AS_CLOSED, and an OPEN) or was still serving
	// (its kept open given back with CLOSE, answered SNFS_ERR_FENCED).
	st := mgrOf(a).SNFSStats()
	t.Logf("renewals %d, kept opens given back %d, fenced %d, treated as closed %d",
		st.KeptRenewals.Load(), st.KeptDistrusted.Load(), st.Fenced.Load(), st.TreatedAsClosed.Load())
}

// TestKeptOpenAfterPartitionHealed: as TestKeptOpenAfterPartition, the
// partition healed whole before A opens f (the callback A gets then races
// its open).
func TestKeptOpenAfterPartitionHealed(t *testing.T) {
	old, theirs := []byte("A read these bytes before the partition"), []byte("B wrote these while A was cut off")
	p, a, b, ia, ib := keptLeaseSetup(t, old)
	p.Partition(0)
	bWrites(t, b, ib, theirs)
	p.Heal()
	if d, err := openReadErr(a, ia); err != nil || !bytes.Equal(d, theirs) {
		t.Fatalf("A reads f after the partition: %q, %v; want B's %q", d, err, theirs)
	}
}

// TestKeptOpenAfterLostConnection: A's connection is reset and A cannot
// connect again for longer than the callback timeout, while B writes f: the
// server's callback finds no connection of A's and times out (A fenced).
// Once A is back on a new connection, its open of f must not take over the
// kept open granted on the old one: it gives it back and OPENs, and reads
// B's bytes. Before the lease of kept opens, it read the cache's old bytes.
func TestKeptOpenAfterLostConnection(t *testing.T) {
	old, theirs := []byte("A read these bytes before its connection broke"), []byte("B wrote these meanwhile")
	p, a, b, ia, ib := keptLeaseSetup(t, old)
	p.Partition(0)
	if n := p.Reset(); n < 1 {
		t.Fatalf("the proxy reset %d connections; want A's", n)
	}
	bWrites(t, b, ib, theirs)
	p.Heal()
	// A connected again (a call of its own: the root's attributes).
	if _, _, err := a.Getattr(context.Background(), a.Root(), vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	if d, err := openReadErr(a, ia); err != nil || !bytes.Equal(d, theirs) {
		t.Fatalf("A reads f after its reconnection: %q, %v; want B's %q", d, err, theirs)
	}
	if n := mgrOf(a).stats.KeptDistrusted.Load(); n < 1 {
		t.Errorf("A gave back %d files' kept opens for the lease; want at least 1", n)
	}
}

// TestKeptOpenTakenOverWhileLeaseHolds: with no partition, a kept open is
// still taken over with no OPEN while the lease holds (the mount made a
// call less than half the callback timeout ago), and after an idle spell
// longer than that once a NULL renewed the lease (no CLOSE, no OPEN).
func TestKeptOpenTakenOverWhileLeaseHolds(t *testing.T) {
	old := []byte("nobody changes these")
	_, a, _, ia, _ := keptLeaseSetup(t, old)
	st := mgrOf(a).SNFSStats()
	reopens, distrusted, renewals := st.DelayedReopens.Load(), st.KeptDistrusted.Load(), st.KeptRenewals.Load()
	if d, err := openReadErr(a, ia); err != nil || !bytes.Equal(d, old) {
		t.Fatalf("A's reopen: %q, %v", d, err)
	}
	if n := st.DelayedReopens.Load() - reopens; n != 1 {
		t.Fatalf("reopen within the lease: %d kept opens taken over; want 1", n)
	}
	if n := st.KeptRenewals.Load() - renewals; n != 0 {
		t.Fatalf("reopen within the lease: %d renewals; want none", n)
	}
	time.Sleep(keptLeaseCBT/2 + 100*time.Millisecond)
	if d, err := openReadErr(a, ia); err != nil || !bytes.Equal(d, old) {
		t.Fatalf("A's reopen after an idle spell: %q, %v", d, err)
	}
	if n := st.KeptRenewals.Load() - renewals; n != 1 {
		t.Fatalf("reopen after the lease lapsed: %d renewals; want 1", n)
	}
	if n := st.DelayedReopens.Load() - reopens; n != 2 {
		t.Fatalf("reopens: %d kept opens taken over; want 2", n)
	}
	if n := st.KeptDistrusted.Load() - distrusted; n != 0 {
		t.Fatalf("%d files' kept opens given back with no partition; want none", n)
	}
}

// aWritesKept has A write f whole with data and close it: its write open
// is kept, the data dirty in A's cache (an hour's write-back delay).
func aWritesKept(t *testing.T, a *vfs.FS, ia *vfs.Inode, data []byte) {
	t.Helper()
	ctx := context.Background()
	f, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDWR|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, f, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	ia.Mu.Lock()
	kept, dirty := stOf(ia).Kept(state.Write), stOf(ia).Dirty()
	ia.Mu.Unlock()
	if kept != 1 || !dirty {
		t.Fatalf("after A's write: %d kept write opens, dirty %v; want 1, true", kept, dirty)
	}
}

// conflictCopies returns the contents of f's conflict copies in export.
func conflictCopies(t *testing.T, export string) [][]byte {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(export, "f.snfs-conflict-*"))
	var out [][]byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestKeptDirtyOpenAfterPartition: A holds dirty data of f under a kept
// write open and is cut off past the callback timeout while B writes f
// (A fenced). Back, A's open of f reads B's bytes, and A's bytes, which
// its close had acknowledged, are not lost: kept beside the file as a
// conflict copy (the fenced path), never written over B's.
func TestKeptDirtyOpenAfterPartition(t *testing.T) {
	old, mine, theirs := []byte("the server's first bytes"), []byte("A wrote these, acknowledged by its close"), []byte("B wrote these while A was cut off")
	p, a, b, ia, ib := keptLeaseSetup(t, old)
	export := mgrOf(a).cfg.export
	aWritesKept(t, a, ia, mine)
	p.Stall(faultproxy.ClientToServer)
	p.Stall(faultproxy.ServerToClient)
	bWrites(t, b, ib, theirs)
	p.Heal()
	if d, err := openReadErr(a, ia); err != nil || !bytes.Equal(d, theirs) {
		t.Fatalf("A reads f after the partition: %q, %v; want B's %q", d, err, theirs)
	}
	if err := a.Sync(context.Background()); err != nil {
		t.Logf("A's sync: %v", err)
	}
	if d, err := os.ReadFile(filepath.Join(export, "f")); err != nil || !bytes.Equal(d, theirs) {
		t.Fatalf("the server's f: %q, %v; want B's %q (A's data must not go over it)", d, err, theirs)
	}
	cc := conflictCopies(t, export)
	if len(cc) != 1 || !bytes.Equal(cc[0], mine) {
		t.Fatalf("conflict copies of f: %q; want one with A's %q", cc, mine)
	}
}

// TestKeptDirtyOpenAfterReset: A holds dirty data of f under a kept write
// open when its connection breaks; nobody else touches f. A's next open
// gives the kept opens back (granted on the old connection) and OPENs:
// no fencing, A reads its own bytes, writes them back, and no conflict copy
// appears.
func TestKeptDirtyOpenAfterReset(t *testing.T) {
	old, mine := []byte("the server's first bytes"), []byte("A wrote these, acknowledged by its close")
	p, a, _, ia, _ := keptLeaseSetup(t, old)
	export := mgrOf(a).cfg.export
	aWritesKept(t, a, ia, mine)
	lost := mgrOf(a).sess.ConnectionsLost()
	if n := p.Reset(); n < 1 {
		t.Fatalf("the proxy reset %d connections; want A's", n)
	}
	// An open before A's session saw the reset would take the kept open
	// over, rightly: nothing could have been fenced yet.
	for deadline := time.Now().Add(10 * time.Second); mgrOf(a).sess.ConnectionsLost() == lost; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A's session did not see its connection reset within 10 s")
		}
	}
	if d, err := openReadErr(a, ia); err != nil || !bytes.Equal(d, mine) {
		t.Fatalf("A reads f after its reconnection: %q, %v; want its own %q", d, err, mine)
	}
	st := mgrOf(a).SNFSStats()
	if n := st.KeptDistrusted.Load(); n < 1 {
		t.Errorf("A gave back %d files' kept opens after its reconnection; want at least 1", n)
	}
	if err := a.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d, err := os.ReadFile(filepath.Join(export, "f")); err != nil || !bytes.Equal(d, mine) {
		t.Fatalf("the server's f after A's sync: %q, %v; want A's %q", d, err, mine)
	}
	if cc := conflictCopies(t, export); len(cc) != 0 || st.Conflicts.Load() != 0 {
		t.Fatalf("conflict copies of f: %q (counted %d); want none", cc, st.Conflicts.Load())
	}
}
