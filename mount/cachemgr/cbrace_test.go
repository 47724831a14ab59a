package cachemgr

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// A callback can be served before the answer of an OPEN of the same file
// that came in ahead of it on the connection is applied: callbacks run on
// their own goroutines, the OPEN's application on the opener's. The
// callback then concerns the open being applied (issue 22, item 3: a read
// after another mount's rewrite found the old version, a torn mix or an
// empty file). These tests run the callback in exactly that window
// (openAnswered): the other client's conflicting OPEN is sent from it and
// returns only once the server has this client's answer.

// twoSNFS opens two snfs-mode FSes, A (with delayed close aDelay) and B, on
// one test server, and has B write old into a new file "f", written back and
// closed; it returns f's inode in each.
func twoSNFS(t *testing.T, aDelay time.Duration, old []byte) (a, b *vfs.FS, ia, ib *vfs.Inode) {
	t.Helper()
	addr, exp := testServer(t)
	ctx := context.Background()
	open := func(name string, delay time.Duration) *vfs.FS {
		v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: exp, Name: name,
			CacheDir: t.TempDir(), WriteBackDelay: time.Hour, CloseDelay: delay,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := v.Sync(ctx); err != nil {
				t.Error(err)
			}
			if err := v.Close(); err != nil {
				t.Error(err)
			}
		})
		return v
	}
	a, b = open("A", aDelay), open("B", 0)
	e, f, err := b.Create(ctx, b.Root(), vfs.Cred{}, "f", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, f, 0, old); err != nil {
		t.Fatal(err)
	}
	if err := b.Fsync(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	ea, err := a.Lookup(ctx, a.Root(), vfs.Cred{}, "f")
	if err != nil {
		t.Fatal(err)
	}
	return a, b, ea.Inode, e.Inode
}

// duringAnswer runs other once, in v's window between the answer of an OPEN
// of i and its application.
func duringAnswer(t *testing.T, v *vfs.FS, i *vfs.Inode, other func()) {
	done := false
	mgrOf(v).openAnswered = func(in *vfs.Inode) {
		if in == i && !done {
			done = true
			other()
		}
	}
	t.Cleanup(func() { mgrOf(v).openAnswered = nil })
}

// rewriteOpen is the rest of B's rewrite after its open with O_TRUNC, as
// the kernel sends it (the truncation is a SETATTR of the size: no atomic
// O_TRUNC): write, close(2), release.
func rewriteOpen(t *testing.T, b *vfs.FS, f *vfs.File, data []byte) {
	t.Helper()
	ctx := context.Background()
	var zero uint64
	if _, _, err := b.Setattr(ctx, f.I, vfs.Cred{}, vfs.SetAttr{Size: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, f, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
}

// readAll reads a whole open file.
func readAll(t *testing.T, v *vfs.FS, f *vfs.File) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := v.Read(context.Background(), f, uint64(len(out)), buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:n]...)
		if n < len(buf) {
			return out
		}
	}
}

// openRead opens i for reading and reads it whole.
func openRead(t *testing.T, v *vfs.FS, i *vfs.Inode) []byte {
	t.Helper()
	ctx := context.Background()
	f, _, err := v.Open(ctx, i, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, v, f)
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestCallbackRacingOpenAnswerWriter: B's OPEN for writing is answered
// (caching, B the only opener); A's OPEN for reading follows and makes the
// server call B back (write back and invalidate) before B has applied its
// answer. B answered CB_STALE (it held nothing yet), so the server dropped
// B's open; B then cached and kept its writes, and its CLOSE, saying dirty,
// matched no open: A's next open read the old version from the server.
func TestCallbackRacingOpenAnswerWriter(t *testing.T) {
	ctx := context.Background()
	old, next := bytes.Repeat([]byte("old version; "), 3000), bytes.Repeat([]byte("B's new version. "), 2000)
	a, b, ia, ib := twoSNFS(t, 0, old)
	var fa *vfs.File
	duringAnswer(t, b, ib, func() {
		var err error
		if fa, _, err = a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY); err != nil {
			t.Error(err)
		}
	})
	fb, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if fa == nil {
		t.Fatal("A's open did not run in B's window")
	}
	if snfsCaching(ib) {
		t.Error("B caches a file A opened while B's OPEN was being answered")
	}
	readAll(t, a, fa) // overlapping: any version
	rewriteOpen(t, b, fb, next)
	if err := a.Release(ctx, fa); err != nil {
		t.Fatal(err)
	}
	if got := openRead(t, a, ia); !bytes.Equal(got, next) {
		t.Fatalf("A reads %d bytes after B's rewrite (old: %v); want B's %d", len(got), bytes.Equal(got, old), len(next))
	}
}

// TestCallbackRacingOpenAnswerReader: A's OPEN for reading is answered with
// caching; B's OPEN for writing follows and makes the server call A back
// (invalidate) before A has applied its answer. A then cached anyway, filled
// its cache with the server's bytes of that moment and kept its open at the
// last close (delayed close): its next open took the kept one over, with no
// OPEN, and read the old version.
func TestCallbackRacingOpenAnswerReader(t *testing.T) {
	ctx := context.Background()
	old, next := bytes.Repeat([]byte("old version; "), 3000), bytes.Repeat([]byte("B's new version. "), 2000)
	a, b, ia, ib := twoSNFS(t, time.Hour, old)
	// A has read the file before (its cache holds it) and closed it.
	if got := openRead(t, a, ia); !bytes.Equal(got, old) {
		t.Fatalf("A's first read: %d bytes; want %d", len(got), len(old))
	}
	mgrOf(a).closeDelayed(ia, true)
	var fb *vfs.File
	duringAnswer(t, a, ia, func() {
		var err error
		if fb, _, err = b.Open(ctx, ib, vfs.Cred{}, syscall.O_WRONLY|syscall.O_TRUNC); err != nil {
			t.Error(err)
		}
	})
	fa, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if fb == nil {
		t.Fatal("B's open did not run in A's window")
	}
	if snfsCaching(ia) {
		t.Error("A caches a file B opened for writing while A's OPEN was being answered")
	}
	readAll(t, a, fa) // overlapping: any version
	rewriteOpen(t, b, fb, next)
	if err := a.Release(ctx, fa); err != nil {
		t.Fatal(err)
	}
	if got := openRead(t, a, ia); !bytes.Equal(got, next) {
		t.Fatalf("A reads %d bytes after B's rewrite (old: %v); want B's %d", len(got), bytes.Equal(got, old), len(next))
	}
}

// TestWriteRacingCallbackWriteBack: B caches f open for writing; A's OPEN
// makes the server call B back (write back and invalidate). An application
// write of B's that lands while the callback's write-back runs went into the
// cache directory, behind the write-back, since caching stopped only after
// it: the server, answered, no longer counted B as dirty, and A's next open
// (B's close(2) returned, its release not yet sent, as FUSE releases
// asynchronously) read the server's copy without it.
func TestWriteRacingCallbackWriteBack(t *testing.T) {
	ctx := context.Background()
	old := bytes.Repeat([]byte("old version; "), 3000)
	part1, part2 := bytes.Repeat([]byte("B's first write. "), 1000), bytes.Repeat([]byte("B's second write, as the callback writes back. "), 500)
	a, b, ia, ib := twoSNFS(t, 0, old)
	fb, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if !snfsCaching(ib) {
		t.Fatal("B does not cache its only open")
	}
	var zero uint64
	if _, _, err := b.Setattr(ctx, ib, vfs.Cred{}, vfs.SetAttr{Size: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, fb, 0, part1); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	var started atomic.Bool
	mgrOf(b).beforeMarkClean.set(func(in *vfs.Inode) {
		if in != ib || !started.CompareAndSwap(false, true) {
			return
		}
		go func() {
			_, err := b.Write(ctx, fb, uint64(len(part1)), part2)
			wrote <- err
		}()
		// A write into the cache directory is done at once; one that goes
		// through waits for this write-back (it writes back first).
		select {
		case err := <-wrote:
			wrote <- err
		case <-time.After(200 * time.Millisecond):
		}
	})
	t.Cleanup(func() { mgrOf(b).beforeMarkClean.set(nil) })
	fa, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if !started.Load() {
		t.Fatal("A's open did not make B write back")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx, fb); err != nil { // B's close(2)
		t.Fatal(err)
	}
	if err := a.Release(ctx, fa); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, part1...), part2...)
	if got := openRead(t, a, ia); !bytes.Equal(got, want) {
		t.Errorf("A reads %d bytes after B's close(2); want B's %d", len(got), len(want))
	}
	if err := b.Release(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := openRead(t, a, ia); !bytes.Equal(got, want) {
		t.Errorf("A reads %d bytes after B's release; want B's %d", len(got), len(want))
	}
}

// TestOpenAnswerRefusingCachingStopsAtOnce: A and B read f, both caching; A
// opens it for writing, which makes it write-shared: A's answer refuses
// caching, and the server no longer counts A as caching. B writes through
// before A has applied the rest of that answer: A's reads through its older
// open must see B's write. A read from its cache directory until the
// answer's application ended.
func TestOpenAnswerRefusingCachingStopsAtOnce(t *testing.T) {
	ctx := context.Background()
	old := bytes.Repeat([]byte("old version; "), 3000)
	fresh := []byte("B's write, through the server")
	a, b, ia, ib := twoSNFS(t, 0, old)
	fa, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx, fa)
	if got := readAll(t, a, fa); !bytes.Equal(got, old) || !snfsCaching(ia) {
		t.Fatalf("A's first read: %d bytes, caching %v; want %d, caching", len(got), snfsCaching(ia), len(old))
	}
	fbr, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx, fbr)
	var fbw *vfs.File
	mgrOf(a).afterOpen = func(in *vfs.Inode) {
		if in != ia || fbw != nil {
			return
		}
		var err error
		if fbw, _, err = b.Open(ctx, ib, vfs.Cred{}, syscall.O_WRONLY); err != nil {
			t.Error(err)
			return
		}
		if _, err := b.Write(ctx, fbw, 0, fresh); err != nil {
			t.Error(err)
		}
		if err := b.Flush(ctx, fbw); err != nil {
			t.Error(err)
		}
		buf := make([]byte, len(fresh))
		if n, err := a.Read(ctx, fa, 0, buf); err != nil || !bytes.Equal(buf[:n], fresh) {
			t.Errorf("A reads %q (%v) after B's write through; want %q", buf[:n], err, fresh)
		}
	}
	faw, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_WRONLY)
	mgrOf(a).afterOpen = nil
	if err != nil {
		t.Fatal(err)
	}
	if fbw == nil {
		t.Fatal("B did not write in A's window")
	}
	if err := a.Release(ctx, faw); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, fbw); err != nil {
		t.Fatal(err)
	}
}

// TestDirtyCloseCrossingWriteBack: B caches f open for writing; A's GETATTR
// makes the server call B back to write back (CB_WRITEBACK, which lets B go
// on caching). While the callback's write-back runs, B writes more into its
// cache and closes f: its CLOSE, saying dirty, reaches the server before the
// callback's CB_OK. The server took that answer to mean B held nothing
// dirty any more and forgot B as the last writer: A's next open read the
// server's copy without B's last write (issue 22 item 3: a prefix of B's
// rewrite, or an empty file, in TestMountSNFSSeqShareOverlap).
func TestDirtyCloseCrossingWriteBack(t *testing.T) {
	ctx := context.Background()
	old := bytes.Repeat([]byte("old version; "), 3000)
	part1, part2 := bytes.Repeat([]byte("B's first write. "), 1000), bytes.Repeat([]byte("B's last write, as the callback writes back. "), 500)
	a, b, ia, ib := twoSNFS(t, 0, old)
	fb, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if !snfsCaching(ib) {
		t.Fatal("B does not cache its only open")
	}
	var zero uint64
	if _, _, err := b.Setattr(ctx, ib, vfs.Cred{}, vfs.SetAttr{Size: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, fb, 0, part1); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	var started atomic.Bool
	mgrOf(b).beforeMarkClean.set(func(in *vfs.Inode) {
		if in != ib || !started.CompareAndSwap(false, true) {
			return
		}
		// B's application writes and closes (write, close(2), release)
		// while the callback writes back: all before the callback's answer.
		go func() {
			_, err := b.Write(ctx, fb, uint64(len(part1)), part2)
			if err == nil {
				err = b.Flush(ctx, fb)
			}
			if err == nil {
				err = b.Release(ctx, fb)
			}
			closed <- err
		}()
		select {
		case err := <-closed:
			closed <- err
		case <-time.After(5 * time.Second):
			t.Error("B's write and release waited for the callback's write-back")
		}
	})
	t.Cleanup(func() { mgrOf(b).beforeMarkClean.set(nil) })
	ia.Invalidate()
	if _, _, err := a.Getattr(ctx, ia, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	if !started.Load() {
		t.Fatal("A's GETATTR did not make B write back")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, part1...), part2...)
	if got := openRead(t, a, ia); !bytes.Equal(got, want) {
		t.Errorf("A reads %d bytes after B's close; want B's %d (%d before its last write)", len(got), len(want), len(part1))
	}
}
