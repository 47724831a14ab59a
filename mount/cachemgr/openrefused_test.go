package cachemgr

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/state"
)

// TestOpenRefusalRevokesEarlierGrant: an OPEN answered cache_enabled = FALSE
// while an earlier OPEN of the same file, answered with caching, is still
// being applied revokes that grant too (docs/protocol.md 4.2): the server
// stopped counting this client as caching when it sent the refusal, so it
// will not call this client back, and the earlier OPEN must not turn caching
// back on after it (found by the client's model check, state/clientfile:
// caching was left on and later reads could be stale). The refusal here is
// the server's recall back-off: B's dirty copy is recalled for A's
// OPEN_WRITE, which is granted (its own conflict is exempt); A's OPEN_READ,
// sent in the first one's window, is not exempt and is refused, with no
// callback to A.
func TestOpenRefusalRevokesEarlierGrant(t *testing.T) {
	ctx := context.Background()
	a, b, ia, ib := twoSNFS(t, 0, []byte("old"))
	// B writes without writing back and closes: the server records B
	// dirty, and A's OPEN_WRITE recalls it.
	g, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	newer := bytes.Repeat([]byte("newer, B's, dirty; "), 100)
	if _, err := b.Write(ctx, g, 0, newer); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	var second *vfs.File
	var secondErr error
	done := false
	mgrOf(a).afterOpen = func(in *vfs.Inode) {
		if in != ia || done {
			return
		}
		done = true
		second, _, secondErr = a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
	}
	w, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_WRONLY)
	mgrOf(a).afterOpen = nil
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx, w)
	if secondErr != nil {
		t.Fatal(secondErr)
	}
	defer a.Release(ctx, second)
	if !second.DirectIO {
		t.Fatal("the second OPEN was granted caching; the test needs it refused (the recall back-off)")
	}
	if snfsCaching(ia) {
		t.Error("caching after an OPEN the server answered without it: the first OPEN's grant was applied after the refusal")
	}
}

// TestCallbackWriteBackFailedNotOK: a callback whose write-back did not
// reach the server (here its context ended: the connection it came on went
// away) is not answered as done. CB_OK says the data is on the server's
// stable storage (docs/protocol.md 5.1): the server would drop this client's
// dirty record while it still held the data, and others would read the old
// copy. The callback fails instead (the server fences the client) and the
// data stays dirty here, written back later.
func TestCallbackWriteBackFailedNotOK(t *testing.T) {
	v, export, e, f := restartTestFile(t)
	i := e.Inode
	want := bytes.Repeat([]byte("dirty, only in the cache directory; "), 200)
	if _, err := v.Write(context.Background(), f, 0, want); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, mode := range []state.CallbackMode{state.Writeback, state.Relinquish, state.WritebackInvalidate} {
		if st := mgrOf(v).Callback(ended, i.FH, mode, nil); st == state.OK || st == state.TreatAsClosed {
			t.Errorf("%v callback whose write-back failed: answered %v", mode, st)
		}
		if cf := cacheFileOrNil(i); cf == nil || !cf.NeedsWriteBack() {
			t.Fatalf("%v callback whose write-back failed dropped the dirty data", mode)
		}
	}
	if err := v.Fsync(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(export, "f")); !bytes.Equal(got, want) {
		t.Errorf("the server's file after the kept data's write-back: %d bytes; want %d", len(got), len(want))
	}
}

// TestOpenFailedAfterAnswerClosed: an OPEN the server answered, whose
// application then fails (here the cache directory is closed under it, as by
// an unmount racing the open), fails the application's open; the open the
// server counted is CLOSEd, not left counted at both ends for ever (found by
// the client's model check, state/clientfile). Seen from another client: a
// writer alone on the file again may cache it.
func TestOpenFailedAfterAnswerClosed(t *testing.T) {
	addr, exp := testServer(t)
	ctx := context.Background()
	open := func(name string) *vfs.FS {
		v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: exp, Name: name,
			CacheDir: t.TempDir(), WriteBackDelay: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, b := open("A"), open("B")
	defer func() {
		if err := b.Sync(ctx); err != nil {
			t.Error(err)
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		// A's cache directory is closed already: its Close says so.
		if err := a.Close(); err != nil && !errors.Is(err, cachedir.ErrClosed) {
			t.Error(err)
		}
	}()
	if err := os.WriteFile(filepath.Join(exp, "f"), []byte("the server's"), 0o644); err != nil {
		t.Fatal(err)
	}
	ea, err := a.Lookup(ctx, a.Root(), vfs.Cred{}, "f")
	if err != nil {
		t.Fatal(err)
	}
	ia := ea.Inode
	mgrOf(a).afterOpen = func(in *vfs.Inode) {
		if in == ia {
			mgrOf(a).cache.Close()
		}
	}
	if g, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY); err == nil {
		a.Release(ctx, g)
		t.Fatal("A's open succeeded with its cache directory closed")
	}
	mgrOf(a).afterOpen = nil
	ia.Mu.Lock()
	counted := stOf(ia).Opens(state.Read) + stOf(ia).Opens(state.Write)
	ia.Mu.Unlock()
	if counted != 0 {
		t.Errorf("A counts %d protocol opens after its open failed", counted)
	}
	eb, err := b.Lookup(ctx, b.Root(), vfs.Cred{}, "f")
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := b.Open(ctx, eb.Inode, vfs.Cred{}, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx, w)
	if w.DirectIO {
		t.Error("B's OPEN_WRITE was refused caching: the server still counts A's failed open")
	}
}
