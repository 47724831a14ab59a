package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"time"

	"snfs/drcstore"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// An APPEND retransmitted across a restart of the server is applied once
// (server/appendintent.go): the server may be killed after the data was
// written and before its reply was saved, or before the data was written.

// appendXID sends an APPEND with the given xid on a new connection (after a
// restart the old one is gone; the reply cache ignores the port).
func appendXID(t *testing.T, e *env, xid uint32, fh nfs3.FH, data []byte, stable nfs3.StableHow) *snfs1.AppendRes {
	t.Helper()
	c, err := sunrpc.Dial(ctx, "tcp", e.addr, snfs1.Program, snfs1.Version)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if xid == 0 {
		xid = c.NextXID()
	}
	var res snfs1.AppendRes
	if err := c.CallXID(ctx, xid, snfs1.ProcAppend, &snfs1.AppendArgs{File: fh, Stable: stable, Data: data}, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}

// killedBeforeReply returns a copy of e's state directory as a server killed
// just before it saved the reply of the call xid leaves it: every record of
// the reply log but that reply (its intent stays).
func killedBeforeReply(t *testing.T, e *env, xid uint32) string {
	t.Helper()
	dir := copyDir(t, e.stateDir)
	st, err := drcstore.Open(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var keep []sunrpc.SavedReply
	dropped, intents := 0, 0
	err = st.Load(func(r sunrpc.SavedReply) {
		switch {
		case r.Key.XID == xid && !r.Intent:
			dropped++
		case r.Key.XID == xid:
			intents++
			keep = append(keep, r)
		default:
			keep = append(keep, r)
		}
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 1 || intents != 1 {
		t.Fatalf("the reply log holds %d replies and %d intents of xid %d, want 1 and 1", dropped, intents, xid)
	}
	if err := os.RemoveAll(filepath.Join(dir, drcstore.DirName)); err != nil {
		t.Fatal(err)
	}
	st, err = drcstore.Open(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Save(keep); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSNFSAppendRetransmittedAfterKill: an APPEND whose server was killed
// after the write and before the reply was saved is answered, when the
// client retransmits it to the next server, with the offset it went to and
// is not appended again; one killed before the write is appended, once. The
// resolution holds across a further restart, after another client appended
// the same bytes ("again" cases).
func TestSNFSAppendRetransmittedAfterKill(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, tc := range []struct {
		name    string
		stable  nfs3.StableHow
		written bool // the kill came after the write (else before it)
		again   bool // another client appends the same data before the retransmission, then a restart
	}{
		{"unstable-written", nfs3.Unstable, true, false},
		{"filesync-written", nfs3.FileSync, true, false},
		{"datasync-written", nfs3.DataSync, true, false},
		{"unstable-not-written", nfs3.Unstable, false, false},
		{"unstable-written-again", nfs3.Unstable, true, true},
		{"filesync-not-written-again", nfs3.FileSync, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "rw,no_root_squash")
			fh := e.create(e.nfs, e.root, "log", 0o644)
			head := []byte("head\n")
			if r := appendXID(t, e, 0, fh, head, nfs3.FileSync); r.Status != nfs3.OK {
				t.Fatalf("first APPEND: %v", r.Status)
			}
			rec := []byte("record\n")
			xid := e.nfs.NextXID() + 1000
			first := appendXID(t, e, xid, fh, rec, tc.stable)
			if first.Status != nfs3.OK || first.Offset != uint64(len(head)) || int(first.Count) != len(rec) {
				t.Fatalf("APPEND: %v at %d, %d bytes", first.Status, first.Offset, first.Count)
			}
			e.cfg.StateDir = killedBeforeReply(t, e, xid)
			if !tc.written {
				if err := os.Truncate(e.path("log"), int64(len(head))); err != nil {
					t.Fatal(err)
				}
			}
			e.restart()
			want := append(bytes.Clone(head), rec...)
			if tc.again {
				// Another client's append of the same bytes, then a restart:
				// the file's bytes at the intent's size no longer tell.
				other := appendXID(t, e, 0, fh, rec, nfs3.FileSync)
				if other.Status != nfs3.OK {
					t.Fatalf("other APPEND: %v", other.Status)
				}
				want = append(want, rec...)
				e.restart()
			}
			again := appendXID(t, e, xid, fh, rec, tc.stable)
			if again.Status != nfs3.OK || int(again.Count) != len(rec) || again.Committed != tc.stable {
				t.Fatalf("retransmitted after the restart: %v, %d bytes, committed %v", again.Status, again.Count, again.Committed)
			}
			if tc.written && again.Offset != first.Offset {
				t.Errorf("retransmitted after the restart: offset %d, the first attempt's was %d", again.Offset, first.Offset)
			}
			if !tc.written && tc.again && again.Offset != uint64(len(head)+len(rec)) {
				t.Errorf("retransmitted after the restart: offset %d, want %d (after the other client's)", again.Offset, len(head)+len(rec))
			}
			if got := mustRead(t, e.path("log")); !bytes.Equal(got, want) {
				t.Fatalf("the file holds %q, want %q", got, want)
			}
		})
	}
}

// TestSNFSAppendStalledFlush: a stable APPEND whose flush takes longer than
// the server waits (JukeboxAfter) is answered as written UNSTABLE with its
// offset, not NFS3ERR_JUKEBOX: its data is in the file, and a "try again"
// would have the client append it a second time. The reply is cached: a
// retransmission gets it. A COMMIT then makes the data durable.
func TestSNFSAppendStalledFlush(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	d := &durability{delay: 700 * time.Millisecond}
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Sync, c.JukeboxAfter = d.hook, 100*time.Millisecond })
	fh := e.create(e.nfs, e.root, "log", 0o644)
	d.setPath(e.path("log"))
	head := []byte("head\n")
	leader := make(chan *snfs1.AppendRes, 1)
	go func() { leader <- appendXID(t, e, 0, fh, head, nfs3.FileSync) }()
	d.waitFlushing(t, 1) // the first append is being flushed
	rec := []byte("record\n")
	xid := e.nfs.NextXID() + 1000
	for i := range 2 {
		res := appendXID(t, e, xid, fh, rec, nfs3.FileSync)
		if res.Status != nfs3.OK || res.Offset != uint64(len(head)) || int(res.Count) != len(rec) || res.Committed != nfs3.Unstable {
			t.Fatalf("APPEND FILE_SYNC behind a stalled flush (attempt %d): %v at %d, %d bytes, committed %v; want OK at %d, UNSTABLE",
				i+1, res.Status, res.Offset, res.Count, res.Committed, len(head))
		}
	}
	if r := <-leader; r.Status != nfs3.OK || r.Committed != nfs3.FileSync {
		t.Fatalf("the first APPEND: %v, committed %v", r.Status, r.Committed)
	}
	if got, want := mustRead(t, e.path("log")), append(head, rec...); !bytes.Equal(got, want) {
		t.Fatalf("the file holds %q, want %q", got, want)
	}
	c, err := e.nfs.Commit(ctx, fh, 0, 0)
	if err != nil || c.Status != nfs3.OK {
		t.Fatalf("COMMIT: %v %v", c, err)
	}
}
