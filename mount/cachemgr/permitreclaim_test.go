package cachemgr

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/mount/cml"
	"snfs/mount/vfs"
	"snfs/snfs1"
)

// TestPermitDataPushReclaimed: a file made locally whose CREATE the server
// applied but whose data could not be written yet (its push failed) is
// reclaimed after a server restart as this client's closed dirty file, so
// that the restarted server calls this client back for the push before it
// lets another client open the file (without it, the crash cycles with the
// permits on: another mount's acknowledged rewrite overwritten by the push
// retried later). Once pushed, it is reclaimed no more.
func TestPermitDataPushReclaimed(t *testing.T) {
	ff := &failingFlush{}
	s := newServerSync(t, true, ff.sync)
	v, sn, d := permitsMountData(t, s, "permits-data-reclaim", true)
	holdPermit(t, sn, d)
	ctx := context.Background()
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("r"), snfs1.StoreMax+1) // pushed by WRITE, not stored
	f, id := createLocal(t, v, sn, d, "big", data)
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	ff.fail.Store(1 << 40)
	if err := sn.SyncDir(ctx, d); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the directory's fsync with the push failing: %v; want EIO", err)
	}
	fh, ok := sn.permits.log.Handle(id)
	if !ok || sn.permits.offDataOf(id) == nil {
		t.Fatalf("setup: CREATE applied %v, data still local %v; want both", ok, sn.permits.offDataOf(id) != nil)
	}
	found := false
	for _, it := range sn.reclaimItems(ctx) {
		if bytes.Equal(it.File, fh) {
			found = true
			if !it.Dirty || it.Readers+it.Writers != 0 {
				t.Errorf("the file's reclaim item %+v; want dirty and closed", it)
			}
		}
	}
	if !found {
		t.Fatal("a file made locally whose data is not written yet is not reclaimed")
	}
	ff.fail.Store(0)
	if err := sn.SyncDir(ctx, d); err != nil {
		t.Fatalf("the directory's fsync once the server flushes: %v", err)
	}
	for _, it := range sn.reclaimItems(ctx) {
		if bytes.Equal(it.File, fh) && it.Dirty && it.Readers+it.Writers == 0 {
			t.Errorf("reclaimed as dirty once its data is written: %+v", it)
		}
	}
}

// TestPermitsReclaimedAfterRestart (docs/protocol.md section 21.9): after a
// server restart, the mount holds again, under a new id, the permit of the
// directory its log changes (RECLAIM_PERMIT in its reclaim), and not that of
// a directory it held without records; the server holds it too, and the
// log goes in under it with no conflict. A permit whose recall's
// connection went before the log was in (noteCut) is reclaimed as well when
// the restart comes within the callback timeout, and not past it.
func TestPermitsReclaimedAfterRestart(t *testing.T) {
	s := newRestartableServer(t)
	s.grace = 5 * time.Second
	if err := os.Mkdir(filepath.Join(s.export, "e"), 0o777); err != nil {
		t.Fatal(err)
	}
	v, sn, d := permitsMount(t, s, "permits-reclaimed")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ent, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "e")
	if err != nil {
		t.Fatal(err)
	}
	e := ent.Inode
	for _, name := range []string{"r0", "r1", "r2"} {
		if err := os.WriteFile(filepath.Join(s.export, "d", name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	holdPermit(t, sn, d)
	holdPermit(t, sn, e)
	old, _ := sn.permits.get(ctx, d.FH, false)
	logUnlink := func(name string) {
		t.Helper()
		rec := snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: d.FH}, Name: name}
		if _, err := sn.permits.log.AppendLazyBased(rec, []cml.Base{serverBase(t, sn, d, name)}); err != nil {
			t.Fatal(err)
		}
	}
	logUnlink("r0")
	s.restart()
	restartSeen(ctx, t, sn)
	held := map[string]uint64{}
	for _, r := range sn.permits.refs() {
		held[string(r.Dir)] = r.Permit
	}
	if id, ok := held[string(d.FH)]; !ok || id == old.Permit || len(held) != 1 {
		t.Fatalf("permits held after the restart: %v; want d's alone, under a new id (it was %d)", held, old.Permit)
	}
	if st := s.srv.PermitStats(); st.Permits != 1 {
		t.Fatalf("the restarted server holds %d permits; want 1 (d's, reclaimed)", st.Permits)
	}
	if err := syncDirAfterGrace(ctx, sn, d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.export, "d", "r0")); err == nil {
		t.Error("r0 is still on the server: the log did not go in under the reclaimed permit")
	}
	if c := sn.stats.Conflicts.Load(); c != 0 {
		t.Errorf("%d conflicts; want none", c)
	}

	// A recall cut by the server's end: reclaimed within the callback
	// timeout, not past it.
	for _, tc := range []struct {
		name   string
		cutAgo time.Duration
		want   bool
	}{{"r1", 0, true}, {"r2", time.Hour, false}} {
		holdPermit(t, sn, d)
		logUnlink(tc.name)
		sn.permits.drop(d.FH)
		sn.permits.noteCut(d.FH)
		sn.permits.mu.Lock()
		sn.permits.cut[string(d.FH)] = time.Now().Add(-tc.cutAgo)
		sn.permits.mu.Unlock()
		before := sn.sess.ServerVerifier()
		s.restart()
		reclaimSeen(ctx, t, sn, before)
		// Counted as the reclaim takes it: a GET_PERMIT the log's
		// reintegration asks later grants the permit too.
		if got := s.srv.Grace().Permits; (got == 1) != tc.want {
			t.Fatalf("%s: cut %v before the restart: %d permits reclaimed; want reclaimed %v", tc.name, tc.cutAgo, got, tc.want)
		}
		if err := syncDirAfterGrace(ctx, sn, d); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(s.export, "d", tc.name)); err == nil {
			t.Errorf("%s is still on the server after the log went", tc.name)
		}
	}
	if c := sn.stats.Conflicts.Load(); c != 0 {
		t.Errorf("%d conflicts; want none", c)
	}
}

// reclaimSeen waits until sn has reclaimed from a server whose verifier is
// not before.
func reclaimSeen(ctx context.Context, t *testing.T, sn *snfsFS, before snfs1.Verifier) {
	t.Helper()
	for {
		verf := sn.sess.ServerVerifier()
		p := sn.permits
		p.mu.Lock()
		done := verf != before && p.reclaimedSet && p.reclaimedVerf == verf
		p.mu.Unlock()
		if done {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the server's restart was not reclaimed")
		}
		sn.sess.Null(ctx) // the session finds the restart
		time.Sleep(20 * time.Millisecond)
	}
}
