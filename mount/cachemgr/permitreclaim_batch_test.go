package cachemgr

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/cml"
	"snfs/nfs3"
	"snfs/snfs1"
)

// betweenBatches is the mount's sender with before run once, as the
// second batch is sent (the first batch's reply recorded in the log).
type betweenBatches struct {
	s      cml.Sender
	calls  int
	before func()
}

func (b *betweenBatches) Reintegrate(ctx context.Context, perms []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	if b.calls++; b.calls == 2 {
		b.before()
	}
	return b.s.Reintegrate(ctx, perms, recs)
}

// TestPermitsReclaimMadeDirMidReintegration: a directory made under a
// permit whose MKDIR is in a batch answered (its permit granted in that
// reply), with a create in it in a later batch of the same reintegration:
// the server restarts while that later batch is out. The directory's
// permit is reclaimed (the log changes it): it was held as the first
// batch's reply came, not once the whole reintegration returned. It was
// not reclaimed, and another client could list the directory without the
// name the holder's application was told exists. The log then goes in
// under the reclaimed permit with no conflict.
func TestPermitsReclaimMadeDirMidReintegration(t *testing.T) {
	s := newRestartableServer(t)
	s.grace = 5 * time.Second
	_, sn, d := permitsMount(t, s, "reclaim-mid-reint")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holdPermit(t, sn, d)
	p := sn.permits
	mode := uint32(0o755)
	prov, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLMkdir, Dir: snfs1.ObjRef{FH: d.FH}, Name: "sub", Attr: nfs3.Sattr{Mode: &mode}})
	if err != nil {
		t.Fatal(err)
	}
	// The first batch: the MKDIR and creates in d up to snfs1.ReintegrateMax
	// records; the second: the create in sub.
	logCreates(t, sn, d, "c", snfs1.ReintegrateMax-1)
	fmode := uint32(0o644)
	if _, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: snfs1.ObjRef{Prov: prov}, Name: "f", Attr: nfs3.Sattr{Mode: &fmode}}); err != nil {
		t.Fatal(err)
	}
	snd := &betweenBatches{s: p.sender(), before: func() {
		before := sn.sess.ServerVerifier()
		s.restart()
		reclaimSeen(ctx, t, sn, before)
	}}
	p.reint.Lock()
	_, err = p.log.Reintegrate(ctx, snd, p.refs())
	p.reint.Unlock()
	if snd.calls != 2 {
		t.Fatalf("setup: %d batches sent; want 2", snd.calls)
	}
	real, ok := p.log.Handle(prov)
	if !ok || p.log.Len() != 1 || !p.log.ChangesDir(real) {
		t.Fatalf("setup: sub made %v, %d records left (want its create alone), err %v", ok, p.log.Len(), err)
	}
	if got := s.srv.Grace().Permits; got != 1 {
		t.Fatalf("after a restart during the reintegration's second batch, %d permits reclaimed; want 1 (sub's, granted by the first batch's reply)", got)
	}
	if err := syncDirAfterGrace(ctx, sn, d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.export, "d", "sub", "f")); err != nil {
		t.Errorf("sub/f after the log went: %v", err)
	}
	if c := sn.stats.Conflicts.Load(); c != 0 {
		t.Errorf("%d conflicts; want none", c)
	}
}
