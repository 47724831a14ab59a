package cachemgr

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
)

// TestPermitRecallWhileTakingIn: a recall of a permit the mount is about to
// hold, arriving while the reintegration whose reply granted it (an MKDIR's
// permit on the new directory: the state model's TestCMLMkdirModelStaleRecall)
// has taken the reply's records out of the log and not yet its permits, is
// answered once the reintegration is over: the permit is given back and not
// held after. It was answered STALE at once (no permit held, the log empty):
// the server ended the permit, and the mount then held it and made changes
// locally under it that nobody waited for.
func TestPermitRecallWhileTakingIn(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-recall-takein")
	holdPermit(t, sn, d)
	p := sn.permits
	p.mu.Lock()
	h := p.held[string(d.FH)]
	p.mu.Unlock()

	// A reintegration between cml.Log.Reintegrate's return (the log empty)
	// and the taking in of the permits its replies granted.
	p.reint.Lock()
	p.drop(d.FH)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := client.DialNFS(ctx, "tcp", s.addr)
	if err != nil {
		p.reint.Unlock()
		t.Fatal(err)
	}
	defer nc.Close()
	made := make(chan error, 1)
	go func() {
		// Another client's change of the directory: the permit is recalled.
		res, err := nc.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: d.FH, Name: "other"}, Mode: nfs3.Guarded})
		if err == nil && res.Status != nfs3.OK {
			err = res.Status
		}
		made <- err
	}()
	waitRecallOrChange(t, made)

	p.takePermits(p.startsSeen(), []snfs1.PermitRef{h.ref}) // the reintegration takes its reply's permits in
	p.reint.Unlock()
	if err := <-made; err != nil {
		t.Fatalf("the other client's CREATE: %v", err)
	}
	if refs := p.refs(); len(refs) != 0 {
		t.Fatalf("the mount holds %+v after the server recalled it (answered before the reintegration was over: STALE)", refs)
	}
}

// waitRecallOrChange waits until the mount's recall is blocked on the
// reintegration in progress, or the change it holds back was made without
// it (the recall answered at once). It polls the goroutines' stacks: what
// is awaited is a goroutine blocking, which no channel reports.
func waitRecallOrChange(t *testing.T, made chan error) {
	t.Helper()
	buf := make([]byte, 1<<22)
	for {
		select {
		case err := <-made:
			made <- err
			return
		default:
		}
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "cachemgr.(*permits).recall") && strings.Contains(g, "Mutex") {
				return
			}
		}
		runtime.Gosched()
	}
}

// TestPermitsTakenInAfterRestart: the permits a reintegration's replies
// granted are not held when the server restarted since it began (the state
// model's TestCMLMkdirModelOldPermits): serverRestarted forgot every permit,
// and these, of the earlier start, are gone too.
func TestPermitsTakenInAfterRestart(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-takein-restart")
	p := sn.permits
	ref := snfs1.PermitRef{Dir: d.FH, Permit: 12345}
	starts := p.startsSeen()
	p.serverRestarted()
	p.takePermits(starts, []snfs1.PermitRef{ref})
	if refs := p.refs(); len(refs) != 0 {
		t.Fatalf("permits of an earlier server start held: %+v", refs)
	}
	p.takePermits(p.startsSeen(), []snfs1.PermitRef{ref})
	if refs := p.refs(); len(refs) != 1 {
		t.Fatalf("permits of this server start not held: %+v", refs)
	}
	p.drop(d.FH)
}
