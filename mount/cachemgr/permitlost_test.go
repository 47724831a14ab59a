package cachemgr

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/cml"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// lossySender sends REINTEGRATE and loses the reply: the server applied
// the batch, the log cannot know it (a kill or a broken connection after
// the call went).
type lossySender struct{ s cml.Sender }

func (l lossySender) Reintegrate(ctx context.Context, p []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	if _, err := l.s.Reintegrate(ctx, p, recs); err != nil {
		return nil, err
	}
	return nil, errors.New("the reply was lost")
}

// TestPermitsLostReplyProbed: a batch the server applied whose reply the
// mount lost (the log keeps it as sent or not), then the server restarts:
// every permit is gone, and the names the log changes are checked before
// it is sent again (permitlost.go). Their bases are from before that
// batch, which the server applied: checked first, the batch's own remove
// of u0 would look like another client's change and be kept as a
// conflict. The log is sent first under no permit (probeFirst): the server
// answers the records it applied by LSN, their bases move, and nothing is
// kept as a conflict.
func TestPermitsLostReplyProbed(t *testing.T) {
	s := newRestartableServer(t)
	_, sn, d := permitsMount(t, s, "permits-lost-reply")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(s.export, "d")
	base := serverFileBase(t, dir, sn, d, "u0")
	holdPermit(t, sn, d)
	p := sn.permits
	mode := uint32(0o644)
	recs := []struct {
		rec  snfs1.CMLRecord
		base cml.Base
	}{
		{snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: d.FH}, Name: "u0"}, base},
		{snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: snfs1.ObjRef{FH: d.FH}, Name: "v0", Attr: nfs3.Sattr{Mode: &mode}}, cml.Base{Dir: d.FH, Name: "v0"}},
	}
	for _, r := range recs {
		if _, err := p.log.AppendLazyBased(r.rec, []cml.Base{r.base}); err != nil {
			t.Fatal(err)
		}
	}
	p.reint.Lock()
	_, err := p.log.Reintegrate(ctx, lossySender{p.sender()}, p.refs())
	p.reint.Unlock()
	if err == nil || !p.log.MaySent() {
		t.Fatalf("the batch whose reply was lost: %v, may have been sent %v", err, p.log.MaySent())
	}
	if _, err := os.Lstat(filepath.Join(dir, "u0")); !os.IsNotExist(err) {
		t.Fatalf("u0 after the batch: %v; the server applied its remove", err)
	}
	s.restart()
	restartSeen(ctx, t, sn)
	if err := syncDirAfterGrace(ctx, sn, d); err != nil {
		t.Fatal(err)
	}
	if n := p.log.Len(); n != 0 {
		t.Errorf("%d records left", n)
	}
	if _, err := os.Lstat(filepath.Join(dir, "v0")); err != nil {
		t.Errorf("v0: %v", err)
	}
	if list, err := ReadConflicts(sn.cfg.CacheDir); err != nil || len(list) != 0 {
		t.Errorf("conflicts listed: %+v, %v; want none (the server applied the batch itself)", list, err)
	}
}

// restartSeen waits until sn has seen its server's restart (its permits
// forgotten, or reclaimed).
func restartSeen(ctx context.Context, t *testing.T, sn *snfsFS) {
	t.Helper()
	// Forgotten, or those of the log's directories reclaimed from the
	// restarted server (permitreclaim.go).
	reclaimed := func() bool {
		p := sn.permits
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.reclaimedSet && p.reclaimedVerf == sn.sess.ServerVerifier()
	}
	for len(sn.permits.refs()) > 0 && !reclaimed() {
		if ctx.Err() != nil {
			t.Fatal("the permits held before the server's restart were not forgotten")
		}
		sn.sess.Null(ctx) // the session finds the restart
		time.Sleep(20 * time.Millisecond)
	}
}

// syncDirAfterGrace is SyncDir of d, asked again while it fails (the grace
// period's refusals) until ctx ends.
func syncDirAfterGrace(ctx context.Context, sn *snfsFS, d *vfs.Inode) error {
	for {
		err := sn.SyncDir(ctx, d)
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
