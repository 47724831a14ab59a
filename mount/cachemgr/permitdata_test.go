package cachemgr

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/state"
)

// TestPermitDataPushedBeforeCallback: a file made locally whose data is
// not on the server after the reintegration that made it (its push failed
// there) has it written before a callback of the file is answered: the
// callback of another client's open must find the data there.
func TestPermitDataPushedBeforeCallback(t *testing.T) {
	s := newServer(t, true)
	v, sn, d := permitsMountData(t, s, "permits-data-callback", true)
	holdPermit(t, sn, d)
	ctx := context.Background()
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	e, f, err := v.Create(ctx, d, vfs.Cred{}, "p", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if !isProvFH(e.Inode.FH) || offOf(f) == nil {
		t.Fatalf("the create was not made locally with local data (handle %x)", e.Inode.FH)
	}
	if _, err := sn.Write(ctx, f, 0, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := sn.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	p := sn.permits
	o, ok := p.made.of(e.Inode.FH)
	if !ok {
		t.Fatal("no provisional object")
	}
	od := p.offDataOf(o.id)
	if od == nil {
		t.Fatal("no local data")
	}
	if p.log.Len() == 0 {
		t.Fatal("the log was sent already")
	}
	// The push after the reintegration fails: the data file is away.
	if err := os.Rename(od.path, od.path+".away"); err != nil {
		t.Fatal(err)
	}
	if err := p.flush(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if p.offDataOf(o.id) == nil {
		t.Fatal("the data was pushed with its file away")
	}
	if err := os.Rename(od.path+".away", od.path); err != nil {
		t.Fatal(err)
	}
	fh, ok := p.log.Handle(o.id)
	if !ok {
		t.Fatal("the reintegration did not make the file")
	}
	// Not read: the server's local access to its export calls the
	// holder back too (server/coexist.go).
	srv := filepath.Join(s.export, "d", "p")
	if fi, err := os.Stat(srv); err != nil || fi.Size() != 0 {
		t.Fatalf("the server's d/p before the callback: %v, %v; want empty", fi, err)
	}
	sn.Callback(ctx, fh, state.Writeback, nil)
	if got, err := os.ReadFile(srv); err != nil || string(got) != "data" {
		t.Errorf("the server's d/p once the callback is answered: %q, %v; want the data", got, err)
	}
	if p.offDataOf(o.id) != nil {
		t.Error("the local data is still held once pushed")
	}
}
