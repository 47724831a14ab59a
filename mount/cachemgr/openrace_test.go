package cachemgr

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/state"
)

// TestOpenRacingOwnWriteBack: an OPEN's answer carries the server's
// attributes from before a write-back of this client's that completed
// before the answer was applied (after a server restart the mount writes
// back at once, while applications open files). The OPEN must not take its
// older size: the write-back has just marked the cache file clean, and
// resizing it to the server's old size emptied the file for every later
// read (found by TestCrashCycles: "mount1 read after mount1's create: reads
// 0 bytes"). Here the write-back is run between the OPEN's answer and its
// application.
func TestOpenRacingOwnWriteBack(t *testing.T) {
	ctx := context.Background()
	v, export, e, f := restartTestFile(t)
	i := e.Inode
	want := bytes.Repeat([]byte("written, closed, not yet written back; "), 500)
	if _, err := v.Write(ctx, f, 0, want); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(export, "f")); err != nil || fi.Size() != 0 {
		t.Fatalf("the server's file before the write-back: %v, %v; want empty", fi, err)
	}
	var once sync.Once
	mgrOf(v).afterOpen = func(in *vfs.Inode) {
		if in == i {
			once.Do(func() {
				if err := mgrOf(v).writeBackInode(ctx, i); err != nil {
					t.Errorf("write-back: %v", err)
				}
			})
		}
	}
	g, _, err := v.Open(ctx, i, vfs.Cred{}, syscall.O_RDONLY)
	mgrOf(v).afterOpen = nil
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release(ctx, g)
	buf := make([]byte, 2*len(want))
	n, err := v.Read(ctx, g, 0, buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("read after the OPEN: %d bytes; want the %d written", n, len(want))
	}
	if got, _ := os.ReadFile(filepath.Join(export, "f")); !bytes.Equal(got, want) {
		t.Errorf("the server's file: %d bytes; want %d", len(got), len(want))
	}
}

// TestRefusedTruncateKeepsCache: a truncation the server refuses (here a user
// without write permission; the mount leaves permission checks to the server)
// does not cut this client's cached copy: the other opens keep reading the
// file's bytes.
func TestRefusedTruncateKeepsCache(t *testing.T) {
	ctx := context.Background()
	v, _, e, f := restartTestFile(t)
	i := e.Inode
	want := bytes.Repeat([]byte("cached and clean; "), 1000)
	if _, err := v.Write(ctx, f, 0, want); err != nil {
		t.Fatal(err)
	}
	if err := v.Fsync(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	g, _, err := v.Open(ctx, i, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release(ctx, g)
	var zero uint64
	nobody := vfs.Cred{UID: 65534, GID: 65534}
	if _, _, err := v.Setattr(ctx, i, nobody, vfs.SetAttr{Size: &zero}); err == nil {
		t.Fatal("nobody truncated root's 0644 file")
	}
	buf := make([]byte, 2*len(want))
	n, err := v.Read(ctx, g, 0, buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("read after a refused truncation: %d bytes; want %d", n, len(want))
	}
}

// TestCallbackAgainTreatAsClosed: a callback sent again after a broken
// connection lost the first answer (docs/protocol.md 5.1) finds the file
// idle here (the delayed close it treated as closed is gone, the clean data
// stays cached). It must answer CB_TREAT_AS_CLOSED again, not CB_OK, which
// would leave the server counting opens this client never CLOSEs.
func TestCallbackAgainTreatAsClosed(t *testing.T) {
	ctx := context.Background()
	v, _, e, f := restartTestFile(t)
	i := e.Inode
	if _, err := v.Write(ctx, f, 0, []byte("some bytes")); err != nil {
		t.Fatal(err)
	}
	if err := v.Fsync(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	for try := 1; try <= 2; try++ {
		if st := mgrOf(v).Callback(ctx, i.FH, state.Writeback, nil); st != state.TreatAsClosed {
			t.Errorf("callback %d to a client with no open of the file: %v; want CB_TREAT_AS_CLOSED", try, st)
		}
	}
}

// TestWriteRacingWriteBackEnd: an application write that lands as a
// write-back ends (after the server committed the data it sent, before the
// file's dirty record is dropped) keeps the file recorded dirty, so that its
// CLOSE says dirty and the server calls this client back for it. The record
// was dropped, the CLOSE said clean, and a plain client read the server's
// copy without the write (TestCrashCycles: a plain read after a mount's
// create missed bytes).
func TestWriteRacingWriteBackEnd(t *testing.T) {
	ctx := context.Background()
	v, _, e, f := restartTestFile(t)
	i := e.Inode
	first := bytes.Repeat([]byte{'a'}, 16384)
	if _, err := v.Write(ctx, f, 0, first); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	mgrOf(v).beforeMarkClean.set(func(in *vfs.Inode) {
		if in == i {
			once.Do(func() {
				if _, err := v.Write(ctx, f, uint64(len(first)), []byte("written as the write-back ended")); err != nil {
					t.Error(err)
				}
			})
		}
	})
	err := mgrOf(v).writeBackInode(ctx, i)
	mgrOf(v).beforeMarkClean.set(nil)
	if err != nil {
		t.Fatal(err)
	}
	cf := cacheFileOrNil(i)
	if cf == nil || !cf.NeedsWriteBack() {
		t.Fatal("the racing write is not in the cache file as dirty")
	}
	if !mgrOf(v).isDirty(i) {
		t.Error("the file is not recorded dirty after a write that raced the write-back's end: its CLOSE would say clean")
	}
}
