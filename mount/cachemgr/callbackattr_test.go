package cachemgr

import (
	"context"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/state"
)

// attrRecorder is a session's callback handler that records what each
// CALLBACK carried and answers CB_OK.
type attrRecorder struct{ got chan *nfs3.Fattr }

func (r attrRecorder) Callback(_ context.Context, _ nfs3.FH, _ state.CallbackMode, attr *nfs3.Fattr) state.Outcome {
	r.got <- attr
	return state.OK
}

// A CALLBACK carries no attributes (docs/protocol.md section 5.1): read when
// the callback is sent, they may describe a file another client changed
// before this one acts (a late callback after a fence), so the server does
// not stat the file for them and the client asks GETATTR when it needs to.
func TestCallbackCarriesNoAttributes(t *testing.T) {
	addr, exp := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := attrRecorder{got: make(chan *nfs3.Fattr, 4)}
	dial := func(name string, h client.CallbackHandler) *client.Session {
		s, err := client.DialSession(ctx, "tcp", addr, client.SessionConfig{Name: name, Handler: h})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Unregister(context.Background()); s.Disconnect() })
		return s
	}
	a, b := dial("A", rec), dial("B", nil)
	mnt, err := a.Mount().Mnt(ctx, exp)
	if err != nil || mnt.Status != 0 {
		t.Fatalf("MNT: %v %v", err, mnt.Status)
	}
	cres, err := a.NFS().Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: mnt.FH, Name: "f"}, Mode: nfs3.Unchecked})
	if err != nil || cres.Status != nfs3.OK || cres.Object == nil {
		t.Fatalf("CREATE: %v %+v", err, cres)
	}
	fh := cres.Object
	// A writes with caching and closes dirty: the file's last writer.
	if ok, err := a.Open(ctx, fh, state.Write); err != nil || !ok.CacheEnabled {
		t.Fatalf("A's OPEN: %+v %v", ok, err)
	}
	if _, err := a.Close(ctx, fh, state.Write, true); err != nil {
		t.Fatal(err)
	}
	// B's OPEN calls A back to write back.
	if _, err := b.Open(ctx, fh, state.Read); err != nil {
		t.Fatal(err)
	}
	select {
	case attr := <-rec.got:
		if attr != nil {
			t.Errorf("the CALLBACK carried attributes (size %d, fileid %d); want none", attr.Size, attr.FileID)
		}
	default:
		t.Fatal("A was not called back before B's OPEN was answered")
	}
}
