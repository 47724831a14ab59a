package tests

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/state"
)

// TestSNFSPermitRecallDeadlineWaitsForBatch: a permit whose recall passes its
// deadline while its holder's REINTEGRATE waits for a third client's slow
// callback ends only when that batch has been applied (docs/protocol.md
// section 21.4): every record of the batch is applied under the permit, and
// the change held back by the recall is made after them - the plain
// client's GUARDED CREATE of a name the batch created fails EXIST. Before,
// the deadline revoked the permit in the middle of the batch: the plain
// CREATE went first and the holder's records after the waiting one were
// refused SNFS_ERR_NOPERMIT.
func TestSNFSPermitRecallDeadlineWaitsForBatch(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const timeout = time.Second
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Table.CallbackTimeout = timeout })
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	D := e.lookup(e.root, "d")
	// The third client caches f for writing and answers its callback past
	// its deadline: the holder's UNLINK of f waits for it that long.
	cacher := newDirBreaks()
	cacher.delay = 3 * timeout
	c := dialSNFS(t, e, "permit-slow-third", cacher)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for { // until C's callback path is verified and it may cache
		fh, okRes, err := c.OpenName(cctx, D, "f", state.Write)
		if err != nil {
			t.Fatal(err)
		}
		if okRes.CacheEnabled {
			break
		}
		if _, err := c.Close(cctx, fh, state.Write, false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The holder answers its recall after a delay, by a batch whose first
	// record waits for C: the recall's deadline passes during the wait.
	h := newPermitHolder()
	h.delay = 600 * time.Millisecond
	a := dialSNFS(t, e, "permit-slow-holder", h)
	p := getPermit(t, a, D)
	h.mu.Lock()
	h.s, h.permit = a, p
	h.log = []snfs1.CMLRecord{
		{LSN: 1, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
		createRec(2, snfs1.ObjRef{FH: D}, "g", 1),
	}
	h.mu.Unlock()
	mode := uint32(0o644)
	start := time.Now()
	r, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "g"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	took := time.Since(start)
	var results []snfs1.CMLResult
	var herr error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		results, herr = h.results, h.err
		h.mu.Unlock()
		if herr != nil || len(results) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(results) != 2 {
		t.Errorf("the holder's batch answered %d records, want 2", len(results))
	}
	if herr != nil {
		t.Fatalf("the holder's REINTEGRATE: %v", herr)
	}
	for _, res := range results {
		if res.Status != nfs3.OK {
			t.Errorf("record %d: %v (the permit ended in the middle of its batch)", res.LSN, res.Status)
		}
	}
	want(t, "plain CREATE of the name the holder's batch created", r.Status, err, nfs3.ErrExist)
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[g]" {
		t.Fatalf("the directory holds %s", got)
	}
	if st := e.srv.PermitStats(); st.Revocations != 1 || st.Permits != 0 {
		t.Fatalf("stats %+v (the recall passed its deadline: a revocation, carried out at the batch's end)", st)
	}
	t.Logf("plain CREATE answered %v after it was sent (callback deadline %v)", took, timeout)
}
