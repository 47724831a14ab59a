package tests

import (
	"bytes"
	"fmt"
	"os"
	"snfs/state"
	"sort"
	"sync"
	"testing"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
)

// SNFS APPEND (docs/protocol.md, "APPEND"; server/append.go): the server
// places the data at its end of file, one write no other write overlaps.

// appendRec is writer w's k-th record; lengths vary so that an overlap shows.
func appendRec(w, k int) []byte {
	return fmt.Appendf(nil, "<%d:%d:%s>", w, k, bytes.Repeat([]byte{byte('a' + (w+k)%26)}, (w*31+k*17)%150))
}

// TestSNFSAppend: writers on two connections append records at once, one of
// them FILE_SYNC, while a local process appends to the exported file too:
// every record is where its reply says, whole, and the file holds nothing
// else.
func TestSNFSAppend(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "log", 0o644)
	other, err := client.DialNFS(ctx, "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const writers, recs = 4, 100
	type placed struct {
		off uint64
		rec []byte
	}
	var (
		mu    sync.Mutex
		all   []placed
		total int
		wg    sync.WaitGroup
	)
	for w := range writers {
		c := e.nfs
		if w%2 == 1 {
			c = other
		}
		stable := nfs3.Unstable
		if w == 3 {
			stable = nfs3.FileSync
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range recs {
				rec := appendRec(w, k)
				res, err := c.Append(ctx, fh, rec, stable)
				if err != nil || res.Status != nfs3.OK {
					t.Errorf("writer %d, record %d: APPEND: %v %v", w, k, err, res)
					return
				}
				if int(res.Count) != len(rec) || res.Committed != stable || res.Wcc.After == nil || res.Wcc.Before != nil {
					t.Errorf("writer %d, record %d: count %d of %d, committed %v, wcc %+v", w, k, res.Count, len(rec), res.Committed, res.Wcc)
					return
				}
				mu.Lock()
				all, total = append(all, placed{res.Offset, rec}), total+len(rec)
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() { // the local process: O_APPEND on the exported file
		defer wg.Done()
		f, err := os.OpenFile(e.path("log"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for k := range recs {
			rec := appendRec(writers, k)
			if _, err := f.Write(rec); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			total += len(rec)
			mu.Unlock()
		}
	}()
	wg.Wait()
	if t.Failed() {
		return
	}
	data := mustRead(t, e.path("log"))
	if len(data) != total {
		t.Fatalf("the file holds %d bytes, the appends wrote %d", len(data), total)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].off < all[j].off })
	for i, p := range all {
		if end := p.off + uint64(len(p.rec)); end > uint64(len(data)) || !bytes.Equal(data[p.off:end], p.rec) {
			t.Fatalf("the record %q placed at %d is not there", p.rec, p.off)
		}
		if i > 0 && all[i-1].off+uint64(len(all[i-1].rec)) > p.off {
			t.Fatalf("records at %d and %d overlap", all[i-1].off, p.off)
		}
	}
	// The local process's records are whole, in the gaps.
	for k := range recs {
		if !bytes.Contains(data, appendRec(writers, k)) {
			t.Fatalf("the local process's record %d is missing", k)
		}
	}
}

// TestSNFSAppendErrors: an APPEND of a directory is NFS3ERR_ISDIR; on a
// read-only export NFS3ERR_ROFS; a failure carries only its status.
func TestSNFSAppendErrors(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	res, err := e.nfs.Append(ctx, e.root, []byte("x"), nfs3.Unstable)
	want(t, "APPEND of a directory", res.Status, err, nfs3.ErrIsDir)
	ro := newEnv(t, "ro,no_root_squash")
	if err := os.WriteFile(ro.path("f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = ro.nfs.Append(ctx, ro.lookup(ro.root, "f"), []byte("x"), nfs3.Unstable)
	want(t, "APPEND on a read-only export", res.Status, err, nfs3.ErrROFS)
	if got := string(mustRead(t, ro.path("f"))); got != "old" {
		t.Fatalf("the file holds %q", got)
	}
}

// TestSNFSAppendCallsBack: an APPEND is a write for the consistency table: a
// protocol client that caches the file dirty is called back (write back and
// invalidate) before the APPEND is placed, so the append lands after the
// data written back.
func TestSNFSAppendCallsBack(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a := newProtoClient(t, e, "client-a")
	a.openCaching(fh, state.Write)
	a.close(fh, state.Write, true) // delayed write-back: "cached" is only in A
	a.setAnswer(func(args *snfs1.CallbackArgs) state.Outcome {
		var res nfs3.WriteRes
		err := a.nfs().Call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Count: 6, Stable: nfs3.FileSync, Data: []byte("cached")}, &res)
		if err != nil || res.Status != nfs3.OK {
			t.Errorf("write-back during the callback: %v %v", err, res.Status)
		}
		return state.OK
	})
	res, err := e.nfs.Append(ctx, fh, []byte("+appended"), nfs3.Unstable)
	ok(t, "APPEND", res.Status, err)
	if cbs := a.got(); len(cbs) != 1 || !cbs[0].Mode.WritesBack() {
		t.Fatalf("A's callbacks: %+v, want one that writes back", cbs)
	}
	if res.Offset != 6 {
		t.Fatalf("APPEND placed at %d, want 6 (after the write-back)", res.Offset)
	}
	if got := string(mustRead(t, e.path("f"))); got != "cached+appended" {
		t.Fatalf("the file holds %q", got)
	}
}
