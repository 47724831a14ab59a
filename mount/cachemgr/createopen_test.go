package cachemgr

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// TestCreateOpenTrusted: what of a CREATE_OPEN's reply its open may be
// applied from (docs/protocol.md 4.21), with a real session's callbacks: a
// callback about the file that began while the call was out and handed the
// open back (CB_STALE: this client held nothing it knew of) voids it, one
// about another file does not; a reply of another server instance (its boot
// verifier) is void.
func TestCreateOpenTrusted(t *testing.T) {
	ctx := context.Background()
	addr, exp := testServer(t)
	v := quietMount(t, addr, exp, "createopen-trusted", 0)
	sn := mgrOf(v)
	made := nfs3.FH{1, 2, 3, 4, 5, 6, 7, 8}
	other := nfs3.FH{8, 7, 6, 5, 4, 3, 2, 1}
	reply := func() *createOpened {
		co := sn.createOpens.begin(sn.AttrStart())
		co.open = snfs1.OpenRes{OpenOK: snfs1.OpenOK{CacheVersion: 3, OldCacheVersion: 3, CacheEnabled: true}}
		co.verf = sn.sess.ServerVerifier()
		return co
	}

	co := reply()
	if out := sn.Callback(ctx, made, state.WritebackInvalidate, nil); out != state.Stale {
		t.Fatalf("callback about a file held nothing of: %v; want CB_STALE", out)
	}
	if ok := co.trusted(ctx, sn, made); ok != nil {
		t.Fatalf("the open a CB_STALE handed back was applied: %+v", ok)
	}

	co = reply()
	sn.Callback(ctx, other, state.WritebackInvalidate, nil)
	if ok := co.trusted(ctx, sn, made); ok == nil || !ok.CacheEnabled {
		t.Fatalf("a callback about another file voided the open (%+v)", ok)
	}

	co = reply()
	co.verf[0] ^= 0xff
	if ok := co.trusted(ctx, sn, made); ok != nil {
		t.Fatal("the open of a reply from another server instance was applied")
	}

	// Nothing is left noted once they ended: a callback now is not waited for.
	if len(sn.createOpens.live) != 0 {
		t.Fatalf("%d CREATE_OPENs still noted", len(sn.createOpens.live))
	}
	// And a real create takes its open from the reply: no OPEN.
	before := sn.stats.CreateOpened.Load()
	_, f, err := v.Create(ctx, v.Root(), vfs.Cred{}, "f", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if n := sn.stats.CreateOpened.Load() - before; n != 1 {
		t.Fatalf("creates opened by their CREATE_OPEN: %d; want 1", n)
	}
}

// TestCreateOpenGivenBackOnFailure: a create whose CREATE_OPEN made the
// file and was granted its open, and which then fails here (the reply
// carried no attributes and the GETATTR that follows it failed: here the
// create's context ended), CLOSEs that open: before, it stayed counted at
// the server with nobody holding it, and the file looked write-shared to
// every other client for as long as this one stayed registered. A's open
// is made write-shared (B holds the file for writing), so that it is not
// one the server calls back, which A would hand back (CB_STALE).
func TestCreateOpenGivenBackOnFailure(t *testing.T) {
	s := newRestartableServer(t)
	a, b := quietMount(t, s.addr, s.export, "A", 0), quietMount(t, s.addr, s.export, "B", 0)
	ctx := context.Background()
	if err := os.WriteFile(filepath.Join(s.export, "f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	eb, err := b.Lookup(ctx, b.Root(), vfs.Cred{}, "f")
	if err != nil {
		t.Fatal(err)
	}
	fb, _, err := b.Open(ctx, eb.Inode, vfs.Cred{}, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}

	sn := mgrOf(a)
	granted := false
	sn.createOpenAnswered = func(res *snfs1.CreateOpenRes) {
		granted = res.Status == nfs3.OK && res.Open.Status == nfs3.OK
		// No attributes: a GETATTR follows, which fails (the server
		// cannot fail it on demand: the handle it is sent is spoilt).
		res.Attr = nil
		res.File = append(nfs3.FH(nil), res.File...)
		res.File[len(res.File)-1] ^= 0xff
	}
	if _, f, err := a.Create(ctx, a.Root(), vfs.Cred{}, "f", 0o644, false, syscall.O_WRONLY); err == nil {
		a.Release(ctx, f)
		t.Fatalf("the create succeeded: its GETATTR was to fail (reply seen: %v)", granted)
	}
	sn.createOpenAnswered = nil
	if !granted {
		t.Fatal("the CREATE_OPEN's reply did not grant its open")
	}

	if err := b.Release(ctx, fb); err != nil {
		t.Fatal(err)
	}
	g, _, err := b.Open(ctx, eb.Inode, vfs.Cred{}, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx, g)
	if g.DirectIO {
		t.Error("B's OPEN_WRITE was refused caching: the server still counts the open of A's failed create")
	}
}

// stallBreaks answers no callback until release is closed, and reports each
// on called. The end-to-end tests have a copy (tests/snfs_createopen_stop_test.go):
// another package, and no test helper package for one type.
type stallBreaks struct {
	called  chan nfs3.FH
	release chan struct{}
}

func (b *stallBreaks) Callback(ctx context.Context, fh nfs3.FH, _ state.CallbackMode, _ *nfs3.Fattr) state.Outcome {
	b.called <- append(nfs3.FH(nil), fh...)
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return state.OK
}

// TestCreateOpenExclusiveAcrossRestart: an O_EXCL create whose CREATE_OPEN
// made the file and waits, before its open, for another client's promise
// on the directory to be broken, while the server stops gracefully and
// starts again: the mount's retransmission gets the saved reply (the file
// made; its open not granted, which the mount sends again) and the create
// succeeds. Before, the reply was not saved, the retransmission ran the
// GUARDED create again and the application got EEXIST for the file it made.
func TestCreateOpenExclusiveAcrossRestart(t *testing.T) {
	s := newRestartableServer(t)
	ctx := context.Background()
	v := quietMount(t, s.addr, s.export, "createopen-restart", 0)
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	d, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "d")
	if err != nil {
		t.Fatal(err)
	}
	holder := &stallBreaks{called: make(chan nfs3.FH, 16), release: make(chan struct{})}
	defer close(holder.release)
	hs, err := client.DialSession(ctx, "tcp", s.addr, client.SessionConfig{Name: "createopen-restart-holder", Handler: holder,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Disconnect()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := hs.ListDir(ctx, d.Inode.FH, 0, [nfs3.CookieVerfSize]byte{}, 4096, 32768)
		if err != nil {
			t.Fatal(err)
		}
		if res.Promised {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("LISTDIR never promised")
		}
		time.Sleep(20 * time.Millisecond)
	}

	type made struct {
		f   *vfs.File
		err error
	}
	done := make(chan made, 1)
	go func() {
		_, f, err := v.Create(ctx, d.Inode, vfs.Cred{}, "x", 0o644, true, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL)
		done <- made{f, err}
	}()
	select {
	case <-holder.called:
	case m := <-done:
		t.Fatalf("the create returned (%v) before the holder's promise was broken", m.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the holder's promise was never broken")
	}
	if _, err := os.Stat(filepath.Join(s.export, "d", "x")); err != nil {
		t.Fatalf("the file is not made while the open waits: %v", err)
	}
	s.restart()
	m := <-done
	if m.err != nil {
		t.Fatalf("the O_EXCL create across the server's restart: %v; want success (the file it made)", m.err)
	}
	if err := v.Release(ctx, m.f); err != nil {
		t.Fatal(err)
	}
}
