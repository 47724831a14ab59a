package cachemgr

import (
	"context"
	"testing"
	"time"

	"snfs/mount/cml"
	"snfs/nfs3"
	"snfs/snfs1"
)

type appendingSender struct {
	s    cml.Sender
	once func()
}

func (a *appendingSender) Reintegrate(ctx context.Context, perms []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	res, err := a.s.Reintegrate(ctx, perms, recs)
	if a.once != nil {
		a.once()
		a.once = nil
	}
	return res, err
}

// A directory made under a permit whose MKDIR is in, with a create in it
// logged (by its provisional id) while that batch was out: after a server
// restart its permit is reclaimed too (the log changes it).
func TestPermitsReclaimMadeDir(t *testing.T) {
	s := newRestartableServer(t)
	s.grace = 5 * time.Second
	_, sn, d := permitsMount(t, s, "rev-made")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holdPermit(t, sn, d)
	p := sn.permits
	mode := uint32(0o755)
	prov, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLMkdir, Dir: snfs1.ObjRef{FH: d.FH}, Name: "sub", Attr: nfs3.Sattr{Mode: &mode}})
	if err != nil {
		t.Fatal(err)
	}
	fmode := uint32(0o644)
	snd := &appendingSender{s: p.sender(), once: func() {
		if _, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: snfs1.ObjRef{Prov: prov}, Name: "f", Attr: nfs3.Sattr{Mode: &fmode}}); err != nil {
			t.Error(err)
		}
	}}
	starts := p.startsSeen()
	res, err := p.log.Reintegrate(ctx, snd, p.refs())
	if err != nil {
		t.Fatal(err)
	}
	p.takePermits(starts, res.Permits)
	real, ok := p.log.Handle(prov)
	if !ok {
		t.Fatal("no handle for sub")
	}
	held := func() map[string]uint64 {
		m := map[string]uint64{}
		for _, r := range p.refs() {
			m[string(r.Dir)] = r.Permit
		}
		return m
	}
	if _, ok := held()[string(real)]; !ok || !p.log.ChangesDir(real) || p.log.Len() != 1 {
		t.Fatalf("setup: sub held %v, log changes it %v, len %d", ok, p.log.ChangesDir(real), p.log.Len())
	}
	s.restart()
	restartSeen(ctx, t, sn)
	if got := s.srv.Grace().Permits; got != 1 {
		t.Fatalf("after the restart, %d permits reclaimed; want 1 (sub's: its create still in the log; Dirs() names %d directories)", got, len(p.log.Dirs()))
	}
}
