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
	"snfs/state"
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

// TestPermitsCutEndedNotReclaimed (docs/protocol.md section 21.9): a
// permit whose recall's connection went before the log was in (noteCut)
// and that then ended - refused SNFS_ERR_NOPERMIT (drop), marked lost, or
// a restart not reclaimed (serverRestarted) - is not named in the reclaim
// of a restart within the callback timeout: the server may have granted
// it to another client since. It was (the cut was forgotten only at a
// reclaim). The log's record goes in all the same, as for any permit lost.
func TestPermitsCutEndedNotReclaimed(t *testing.T) {
	s := newRestartableServer(t)
	s.grace = 5 * time.Second
	_, sn, d := permitsMount(t, s, "cut-ended")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := sn.permits
	for _, tc := range []struct {
		name  string
		ended func()
	}{
		{"dropped", func() { p.drop(d.FH) }},
		{"lost", func() { p.markLost(d.FH) }},
		{"restarted", func() { p.serverRestarted() }},
	} {
		if err := os.WriteFile(filepath.Join(s.export, "d", tc.name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		holdPermit(t, sn, d)
		rec := snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: d.FH}, Name: tc.name}
		if _, err := p.log.AppendLazyBased(rec, []cml.Base{serverBase(t, sn, d, tc.name)}); err != nil {
			t.Fatal(err)
		}
		// The recall's reintegration cut (recall: drop, then noteCut).
		p.drop(d.FH)
		p.noteCut(d.FH)
		tc.ended()
		before := sn.sess.ServerVerifier()
		s.restart()
		reclaimSeen(ctx, t, sn, before)
		if got := s.srv.Grace().Permits; got != 0 {
			t.Fatalf("%s: a cut permit since ended: %d permits reclaimed; want none", tc.name, got)
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

// TestPermitsRecallCutReclaimed: a recall whose reintegration is cut with
// the directory's records still in the log (its callback's context ended:
// the server killed during it) notes the cut after it drops the permit,
// which forgets earlier cuts (TestPermitsCutEndedNotReclaimed): the
// restart that follows reclaims the permit.
func TestPermitsRecallCutReclaimed(t *testing.T) {
	s := newRestartableServer(t)
	s.grace = 5 * time.Second
	_, sn, d := permitsMount(t, s, "recall-cut")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := sn.permits
	if err := os.WriteFile(filepath.Join(s.export, "d", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	holdPermit(t, sn, d)
	rec := snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: d.FH}, Name: "x"}
	if _, err := p.log.AppendLazyBased(rec, []cml.Base{serverBase(t, sn, d, "x")}); err != nil {
		t.Fatal(err)
	}
	cut, stop := context.WithCancel(ctx)
	stop()
	if got := p.recall(cut, d.FH); got == state.OK {
		t.Fatalf("a recall whose reintegration was cut answered %v", got)
	}
	p.mu.Lock()
	_, noted := p.cut[string(d.FH)]
	p.mu.Unlock()
	if !noted {
		t.Fatal("the recall's cut is not noted")
	}
	before := sn.sess.ServerVerifier()
	s.restart()
	reclaimSeen(ctx, t, sn, before)
	if got := s.srv.Grace().Permits; got != 1 {
		t.Fatalf("after a recall cut by the server's end: %d permits reclaimed; want 1", got)
	}
	if err := syncDirAfterGrace(ctx, sn, d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.export, "d", "x")); err == nil {
		t.Error("x is still on the server after the log went")
	}
	if c := sn.stats.Conflicts.Load(); c != 0 {
		t.Errorf("%d conflicts; want none", c)
	}
}
