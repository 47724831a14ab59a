package tests

import (
	"context"
	"os"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
)

// TestSNFSPermitRmdirRecallCycle: two permit holders' batches, each with an
// RMDIR record of a directory whose permit the other holds (docs/protocol.md
// section 21.6, "A removed directory's permit"). Client a holds da's permit
// and db/sub's; b holds db's and da/sub's; a's batch, under both of a's
// permits, removes da/sub, and b's, under both of b's, removes db/sub. Each
// record recalls the other's permit before it is applied, and the recalled
// permit's end is held by its holder's batch in progress (section 21.4, "A
// batch in progress holds the permit's end"), which waits for the same kind
// of recall of the first's: each batch waits for the other's end. The
// server answers the record that would close that cycle NFS3ERR_JUKEBOX at
// once, without waiting and without applying it (section 11); its batch
// ends, the other's recall ends, and the other's batch goes on. The record
// sent again then removes its directory. Before, neither batch ever ended:
// the recalls' answers and deadlines were both held by the batches waiting
// for them.
func TestSNFSPermitRmdirRecallCycle(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const timeout = time.Second
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Table.CallbackTimeout = timeout })
	for _, d := range []string{"da", "db", "da/sub", "db/sub"} {
		if err := os.Mkdir(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	DA, DB := e.lookup(e.root, "da"), e.lookup(e.root, "db")
	DAsub, DBsub := e.lookup(DA, "sub"), e.lookup(DB, "sub")
	// The recalls are answered only once both batches are in.
	ha, hb := newPermitHolder(), newPermitHolder()
	ha.stuck, hb.stuck = make(chan struct{}), make(chan struct{})
	a := dialSNFS(t, e, "permit-cycle-a", ha)
	b := dialSNFS(t, e, "permit-cycle-b", hb)
	pa := []snfs1.PermitRef{getPermit(t, a, DA), getPermit(t, a, DBsub)}
	pb := []snfs1.PermitRef{getPermit(t, b, DB), getPermit(t, b, DAsub)}
	rmdir := func(lsn uint64, dir nfs3.FH) []snfs1.CMLRecord {
		return []snfs1.CMLRecord{{LSN: lsn, Op: snfs1.CMLRmdir, Dir: snfs1.ObjRef{FH: dir}, Name: "sub"}}
	}
	type reply struct {
		who string
		res *snfs1.ReintegrateRes
		err error
	}
	replies := make(chan reply, 2)
	cctx, cancel := context.WithTimeout(ctx, 6*timeout)
	defer cancel()
	start := time.Now()
	go func() {
		res, err := a.Reintegrate(cctx, pa, rmdir(1, DA))
		replies <- reply{"a", res, err}
	}()
	time.Sleep(100 * time.Millisecond) // a's batch waits for b's recall
	go func() {
		res, err := b.Reintegrate(cctx, pb, rmdir(1, DB))
		replies <- reply{"b", res, err}
	}()
	time.Sleep(300 * time.Millisecond)
	close(ha.stuck)
	close(hb.stuck)
	got := map[string]*snfs1.ReintegrateRes{}
	for range 2 {
		r := <-replies
		if r.err != nil {
			t.Fatalf("%s's REINTEGRATE: %v after %v (the batches wait for each other)", r.who, r.err, time.Since(start).Round(time.Millisecond))
		}
		if len(r.res.Results) != 1 {
			t.Fatalf("%s's REINTEGRATE: %+v", r.who, r.res)
		}
		got[r.who] = r.res
		t.Logf("%s's batch answered %v after %v", r.who, r.res.Results[0].Status, time.Since(start).Round(time.Millisecond))
	}
	if took := time.Since(start); took > 3*timeout {
		t.Errorf("the batches took %v (callback timeout %v)", took, timeout)
	}
	if s := got["a"].Results[0].Status; s != nfs3.OK {
		t.Errorf("a's RMDIR, whose batch waited first: %v, want OK", s)
	}
	if s := got["b"].Results[0].Status; s != nfs3.ErrJukebox {
		t.Errorf("b's RMDIR, which would have closed the cycle: %v, want NFS3ERR_JUKEBOX", s)
	}
	if got["b"].Applied != 0 {
		t.Errorf("b's batch answered applied %d: the record answered JUKEBOX was applied", got["b"].Applied)
	}
	// b sends its record again: a's batch is over, its permit on db/sub
	// is recalled and b's RMDIR goes on.
	res, err := b.Reintegrate(cctx, pb, rmdir(1, DB))
	if err != nil || len(res.Results) != 1 || res.Results[0].Status != nfs3.OK {
		t.Fatalf("b's RMDIR sent again: %v %+v", err, res)
	}
	for _, d := range []string{"da/sub", "db/sub"} {
		if _, err := os.Stat(e.path(d)); err == nil {
			t.Errorf("%s is still there", d)
		}
	}
}
