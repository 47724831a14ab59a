package tests

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"snfs/state"
	"syscall"
	"testing"

	"snfs/nfs3"
	"snfs/snfs1"
)

// SNFS ALLOCATE (docs/protocol.md, "ALLOCATE"; server/allocate.go):
// fallocate(2) on the server's file, durable before the reply.

// statOf stats a file of the export.
func statOf(t *testing.T, path string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// fillUp writes a local file of the export until the file system is full.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Smaller and smaller writes, each size until ENOSPC, flushed between
	// (ext4's delayed allocation reserves more than it ends up using).
	for size := 1 << 20; size >= 4096; size /= 4 {
		buf := bytes.Repeat([]byte{0xee}, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &sfs); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled up: %d blocks of %d free", sfs.Bfree, sfs.Bsize)
}

// TestSNFSAllocate: ALLOC_ALLOCATE reserves the range on the server's file
// system and extends the size; ALLOC_KEEP_SIZE reserves without changing
// it; ALLOC_DEALLOCATE punches a hole (zeros, blocks freed, size kept). The
// reply's attributes are the file's after the change. With the file system
// then filled up by a local process, a FILE_SYNC WRITE into the reserved
// range still succeeds (the space was the file's) while another file's gets
// NFS3ERR_NOSPC; an ALLOCATE beyond the free space gets NFS3ERR_NOSPC at the
// call.
func TestSNFSAllocate(t *testing.T) {
	t.Parallel()
	e := newSmallEnv(t) // 32 MiB of ext4
	fh := e.create(e.nfs, e.root, "f", 0o644)
	const mib = 1 << 20

	res, err := e.nfs.Allocate(ctx, fh, snfs1.Allocate, 0, 10*mib)
	ok(t, "ALLOCATE of 10 MiB", res.Status, err)
	st := statOf(t, e.path("f"))
	if st.Size != 10*mib || st.Blocks*512 < 10*mib {
		t.Fatalf("after ALLOCATE: size %d, %d bytes allocated; want 10 MiB and at least 10 MiB", st.Size, st.Blocks*512)
	}
	if res.Attr == nil || res.Attr.Size != 10*mib || res.Attr.Used < 10*mib {
		t.Fatalf("ALLOCATE's attributes: %+v", res.Attr)
	}

	res, err = e.nfs.Allocate(ctx, fh, snfs1.AllocateKeepSize, 10*mib, 2*mib)
	ok(t, "ALLOCATE keeping the size", res.Status, err)
	st2 := statOf(t, e.path("f"))
	if st2.Size != 10*mib || st2.Blocks*512 < 12*mib {
		t.Fatalf("after ALLOC_KEEP_SIZE of 2 MiB more: size %d, %d bytes allocated; want 10 MiB and at least 12 MiB", st2.Size, st2.Blocks*512)
	}

	// Data in the first MiB, then a hole punched through part of it.
	data := bytes.Repeat([]byte{0x5a}, mib)
	var wres nfs3.WriteRes
	err = e.nfs.Call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Count: mib, Stable: nfs3.FileSync, Data: data}, &wres)
	ok(t, "WRITE", wres.Status, err)
	res, err = e.nfs.Allocate(ctx, fh, snfs1.Deallocate, 4096, 64<<10)
	ok(t, "DEALLOCATE", res.Status, err)
	got := mustRead(t, e.path("f"))
	hole := append(bytes.Repeat([]byte{0x5a}, 4096), make([]byte, 64<<10)...)
	hole = append(hole, bytes.Repeat([]byte{0x5a}, mib-len(hole))...)
	if len(got) != 10*mib || !bytes.Equal(got[:mib], hole) {
		t.Fatalf("after DEALLOCATE: %d bytes; the first MiB is not the data with a 64 KiB hole at 4096", len(got))
	}
	if st3 := statOf(t, e.path("f")); st3.Blocks >= st2.Blocks {
		t.Fatalf("DEALLOCATE freed nothing: %d blocks, %d before", st3.Blocks, st2.Blocks)
	}
	if res.Attr == nil || res.Attr.Size != 10*mib {
		t.Fatalf("DEALLOCATE's attributes: %+v", res.Attr)
	}

	// The file system full: the reserved range takes writes, the rest not.
	fillUp(t, e.path("filler"))
	end := bytes.Repeat([]byte{0xa5}, 64<<10)
	err = e.nfs.Call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Offset: 9 * mib, Count: uint32(len(end)), Stable: nfs3.FileSync, Data: end}, &wres)
	ok(t, "WRITE into the reserved range of a full file system", wres.Status, err)
	// Another file's write (not f's: ext4 may keep blocks preallocated for
	// f's own later writes past its end, whatever ALLOCATE asked).
	g := e.create(e.nfs, e.root, "g", 0o644)
	big := bytes.Repeat([]byte{0xa5}, mib)
	err = e.nfs.Call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: g, Count: mib, Stable: nfs3.FileSync, Data: big}, &wres)
	want(t, "WRITE of another file on the full file system", wres.Status, err, nfs3.ErrNoSpc)
	h := e.create(e.nfs, e.root, "h", 0o644)
	res, err = e.nfs.Allocate(ctx, h, snfs1.Allocate, 0, 64*mib)
	want(t, "ALLOCATE beyond the free space", res.Status, err, nfs3.ErrNoSpc)
}

// TestSNFSAllocateErrors: the argument and file-type errors of fallocate(2),
// and the read-only export's; a failure changes nothing.
func TestSNFSAllocateErrors(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "f", 0o644)
	for _, c := range []struct {
		what   string
		fh     nfs3.FH
		off, n uint64
		want   nfs3.Status
	}{
		{"an empty range", fh, 0, 0, nfs3.ErrInval},
		{"an offset past the largest", fh, 1 << 63, 1, nfs3.ErrFBig},
		{"a range past the largest offset", fh, 1<<63 - 10, 11, nfs3.ErrFBig},
		{"a directory", e.root, 0, 1, nfs3.ErrIsDir},
	} {
		res, err := e.nfs.Allocate(ctx, c.fh, snfs1.Allocate, c.off, c.n)
		want(t, "ALLOCATE of "+c.what, res.Status, err, c.want)
	}
	if n := exportSize(t, e.path("f")); n != 0 {
		t.Fatalf("the file has %d bytes after failed ALLOCATEs", n)
	}
	ro := newEnv(t, "ro,no_root_squash")
	if err := os.WriteFile(ro.path("f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ro.nfs.Allocate(ctx, ro.lookup(ro.root, "f"), snfs1.Allocate, 0, 4096)
	want(t, "ALLOCATE on a read-only export", res.Status, err, nfs3.ErrROFS)
	if n := exportSize(t, ro.path("f")); n != 3 {
		t.Fatalf("the read-only file has %d bytes", n)
	}
}

// TestSNFSAllocateCallsBack: an ALLOCATE is a write for the consistency
// table: a protocol client caching the file dirty is called back (write
// back) before the allocation, so the size the allocation sets is past the
// data written back, and the data stays.
func TestSNFSAllocateCallsBack(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a := newProtoClient(t, e, "client-a")
	a.openCaching(fh, state.Write)
	a.close(fh, state.Write, true)                 // delayed write-back: the data is only in A
	cached := bytes.Repeat([]byte("cached"), 2000) // 12000 bytes
	a.setAnswer(func(args *snfs1.CallbackArgs) state.Outcome {
		var res nfs3.WriteRes
		err := a.nfs().Call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Count: uint32(len(cached)), Stable: nfs3.FileSync, Data: cached}, &res)
		if err != nil || res.Status != nfs3.OK {
			t.Errorf("write-back during the callback: %v %v", err, res.Status)
		}
		return state.OK
	})
	res, err := e.nfs.Allocate(ctx, fh, snfs1.Allocate, 0, 8192)
	ok(t, "ALLOCATE", res.Status, err)
	if cbs := a.got(); len(cbs) != 1 || !cbs[0].Mode.WritesBack() {
		t.Fatalf("A's callbacks: %+v, want one that writes back", cbs)
	}
	if got := mustRead(t, e.path("f")); !bytes.Equal(got, cached) {
		t.Fatalf("the file holds %d bytes, want A's %d written back and not cut by the allocation", len(got), len(cached))
	}
	if res.Attr == nil || res.Attr.Size != uint64(len(cached)) {
		t.Fatalf("ALLOCATE's attributes: %+v, want the size %d", res.Attr, len(cached))
	}
}

// TestSNFSAllocateReplayAfterRestart: a DEALLOCATE retransmitted after a
// server restart (killed right after the reply: its state directory as it
// was then) is answered from the saved reply, not executed again: the data
// written into the hole since stays.
func TestSNFSAllocateReplayAfterRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "f", 0o644)
	w, err := e.nfs.Write(ctx, fh, 0, bytes.Repeat([]byte{0x11}, 65536), nfs3.FileSync)
	ok(t, "WRITE", w.Status, err)
	snfs := e.nfs.Program(snfs1.Program, snfs1.Version)
	xid := snfs.NextXID()
	args := &snfs1.AllocateArgs{File: fh, Mode: snfs1.Deallocate, Offset: 0, Length: 65536}
	var first snfs1.AllocateRes
	if err := snfs.CallXID(ctx, xid, snfs1.ProcAllocate, args, &first); err != nil {
		t.Fatal(err)
	}
	ok(t, "DEALLOCATE", first.Status, nil)
	w, err = e.nfs.Write(ctx, fh, 0, []byte("new data"), nfs3.FileSync)
	ok(t, "WRITE into the hole", w.Status, err)
	e.cfg.StateDir = copyDir(t, e.stateDir)
	e.restart()
	snfs = e.nfs.Program(snfs1.Program, snfs1.Version)
	var again snfs1.AllocateRes
	if err := snfs.CallXID(ctx, xid, snfs1.ProcAllocate, args, &again); err != nil {
		t.Fatal(err)
	}
	ok(t, "DEALLOCATE retransmitted", again.Status, nil)
	if got := mustRead(t, e.path("f")); !bytes.HasPrefix(got, []byte("new data")) {
		t.Fatalf("the retransmission was executed again: the file starts %q", got[:8])
	}
	if again.Attr == nil || first.Attr == nil || *again.Attr != *first.Attr {
		t.Fatalf("the retransmission's reply is not the first: %+v, %+v", again.Attr, first.Attr)
	}
}
