package tests

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// OPEN_NAME looks its name up in a directory: a read of the directory, which
// recalls another client's write-back permit first (docs/protocol.md section
// 21.4, "Reads recall too") and is held by the grace period's gate (section
// 21.9), as LOOKUP is.

// openNameXID is one SNFS OPEN_NAME of dir's name by p with xid (0: a new
// one), JUKEBOX not retried.
func (p *protoClient) openNameXID(xid uint32, dir nfs3.FH, name string, mode state.Mode) *snfs1.OpenNameRes {
	p.t.Helper()
	if xid == 0 {
		xid = p.rpc.NextXID()
	}
	cx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var res snfs1.OpenNameRes
	err := p.rpc.CallXID(cx, xid, snfs1.ProcOpenName, &snfs1.OpenNameArgs{Client: p.clientID(), Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Mode: mode}, &res)
	if err != nil {
		p.t.Fatalf("OPEN_NAME %q: %v", name, err)
	}
	return &res
}

func (p *protoClient) openName(dir nfs3.FH, name string, mode state.Mode) *snfs1.OpenNameRes {
	p.t.Helper()
	return p.openNameXID(0, dir, name, mode)
}

// TestSNFSPermitOpenNameRecalls: another protocol client's OPEN_NAME in a
// directory whose permit a session holds recalls the permit and is answered
// once the holder's log is in: the name the holder created and had not
// reintegrated is found and opened, not answered NFS3ERR_NOENT. A second
// OPEN_NAME after the recall, of a file a third client caches for writing,
// waits for that client's callback with its reply deferred already by the
// recall: its answer is the open's, whole. The holder's own OPEN_NAME
// does not recall its permit.
func TestSNFSPermitOpenNameRecalls(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t, "f")
	h := newPermitHolder()
	h.delay = 100 * time.Millisecond // the recall is answered late: the OPEN_NAME's reply is deferred meanwhile
	a := dialSNFS(t, e, "permit-opename-a", h)
	cbC := make(cbRecorder, 16)
	c := dialSNFS(t, e, "permit-opename-c", cbC)
	cacheForWrite(t, c, D, "f")
	p := getPermit(t, a, D)
	h.mu.Lock()
	h.s, h.permit = a, p
	h.log = []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "n", 1)}
	h.mu.Unlock()
	b := verifiedProtoClient(t, e, "permit-opename-b")

	res := b.openName(D, "n", state.Read)
	if res.Status != nfs3.OK {
		t.Fatalf("OPEN_NAME of the holder's logged name: %v (want it found: the permit recalled first)", res.Status)
	}
	select {
	case fh := <-h.recalled:
		if !bytes.Equal(fh, D) {
			t.Fatalf("recall of %x, not the directory", fh)
		}
	default:
		t.Fatal("OPEN_NAME answered without a recall")
	}
	h.mu.Lock()
	results, rerr := h.results, h.err
	h.mu.Unlock()
	if rerr != nil || len(results) != 1 || results[0].Status != nfs3.OK {
		t.Fatalf("the holder's reintegration: %v %+v", rerr, results)
	}
	if !bytes.Equal(res.File, results[0].Obj) || res.Attr == nil {
		t.Fatalf("OPEN_NAME answered %x (attributes %v), the holder made %x", res.File, res.Attr, results[0].Obj)
	}
	b.close(res.File, state.Read, false)

	// Again under a new permit, now of a file c caches for writing: the
	// OPEN_NAME waits for the recall (its reply deferred), then for c's
	// callback.
	p = getPermit(t, a, D)
	h.mu.Lock()
	h.permit = p
	h.log = []snfs1.CMLRecord{createRec(2, snfs1.ObjRef{FH: D}, "m", 2)}
	h.mu.Unlock()
	for len(cbC) > 0 {
		<-cbC
	}
	res = b.openName(D, "f", state.Read)
	if res.Status != nfs3.OK || res.CacheEnabled || res.Attr == nil { // write-shared: not cached
		t.Fatalf("OPEN_NAME of a cached file after the recall: %+v", res)
	}
	if len(h.recalled) != 1 {
		t.Fatal("the second OPEN_NAME answered without a recall")
	}
	if len(cbC) == 0 {
		t.Fatal("OPEN_NAME for reading answered without calling the writing cacher back")
	}
	if got := e.lookup(D, "f"); !bytes.Equal(got, res.File) {
		t.Fatalf("OPEN_NAME answered %x, LOOKUP %x", res.File, got)
	}
	b.close(res.File, state.Read, false)

	// The holder's own OPEN_NAME, on its registered connection, does not
	// recall its permit.
	<-h.recalled
	getPermit(t, a, D)
	fh, _, err := a.OpenName(ctx, D, "m", state.Read)
	if err != nil {
		t.Fatalf("the holder's OPEN_NAME: %v", err)
	}
	if len(h.recalled) != 0 {
		t.Fatal("the holder's own OPEN_NAME recalled its permit")
	}
	if _, err := a.Close(ctx, fh, state.Read, false); err != nil {
		t.Fatal(err)
	}
}

// TestSNFSPermitOpenNameGrace: after a restart, while the holder of a
// directory's permit may still reclaim it, another protocol client's
// OPEN_NAME in the directory is answered NFS3ERR_JUKEBOX, not NFS3ERR_NOENT
// for the name the holder logged; once the holder has reclaimed the permit
// and the grace period is over, the OPEN_NAME recalls it and finds the name.
func TestSNFSPermitOpenNameGrace(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	h := newPermitHolder()
	hold := make(chan struct{})
	reclaimed := make(chan uint64, 1)
	cx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := client.DialSession(cx, "tcp", e.addr, client.SessionConfig{Name: "permit-opename-grace-a", Handler: h, Logger: quietLogger(),
		ReclaimPermits: func(ctx context.Context, _ snfs1.Verifier, reclaim func([]nfs3.FH) ([]uint64, error)) error {
			select {
			case <-hold:
			case <-ctx.Done():
				return ctx.Err()
			}
			ids, err := reclaim([]nfs3.FH{D})
			if err != nil {
				return err
			}
			h.mu.Lock()
			h.permit = snfs1.PermitRef{Dir: D, Permit: ids[0]}
			h.mu.Unlock()
			reclaimed <- ids[0]
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Disconnect() })
	p := getPermit(t, a, D) // sets a's durable flag: the grace period waits for its reclaim
	h.mu.Lock()
	h.s, h.permit = a, p
	h.log = []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "n", 1)}
	h.mu.Unlock()

	restartGrace(e, 30*time.Second)
	b := newProtoClient(t, e, "permit-opename-grace-b")
	xid := b.rpc.NextXID()
	if res := b.openNameXID(xid, D, "n", state.Read); res.Status != nfs3.ErrJukebox {
		t.Fatalf("OPEN_NAME before the holder's reclaim: %v, want NFS3ERR_JUKEBOX", res.Status)
	}
	if res := b.openName(D, "n", state.Read); res.Status != nfs3.ErrJukebox {
		t.Fatalf("OPEN_NAME tried again before the holder's reclaim: %v, want NFS3ERR_JUKEBOX", res.Status)
	}

	close(hold)
	if err := a.Null(cx); err != nil { // a's next call reconnects and reclaims
		t.Fatalf("the holder's NULL after the restart: %v", err)
	}
	select {
	case id := <-reclaimed:
		if id == 0 {
			t.Fatal("the holder's permit was not reclaimed")
		}
	case <-cx.Done():
		t.Fatal("the holder did not reclaim")
	}
	waitGrace(t, e)
	// Sent again with the first try's xid: the JUKEBOX was not kept in the
	// reply cache, so the call runs again.
	res := b.openNameXID(xid, D, "n", state.Read)
	if res.Status != nfs3.OK {
		t.Fatalf("OPEN_NAME after the grace period: %v (want the permit recalled and the name found)", res.Status)
	}
	h.mu.Lock()
	results, rerr := h.results, h.err
	h.mu.Unlock()
	if rerr != nil || len(results) != 1 || results[0].Status != nfs3.OK || !bytes.Equal(results[0].Obj, res.File) {
		t.Fatalf("the holder's reintegration: %v %+v, OPEN_NAME answered %x", rerr, results, res.File)
	}
	b.close(res.File, state.Read, false)
	if _, err := os.Stat(e.path("d/n")); err != nil {
		t.Fatal(err)
	}
}
