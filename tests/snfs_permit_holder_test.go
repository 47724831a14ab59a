package tests

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// createdHolder is a permit holder whose created files' data is still in
// its cache: a write-back callback of one writes that data with WRITE
// before answering, as a mount's delayed write-back does.
type createdHolder struct {
	mu    sync.Mutex
	s     *client.Session
	data  map[string][]byte // by handle
	calls []state.CallbackMode
}

func (h *createdHolder) Callback(ctx context.Context, fh nfs3.FH, mode state.CallbackMode, _ *nfs3.Fattr) state.Outcome {
	h.mu.Lock()
	h.calls = append(h.calls, mode)
	s, data := h.s, h.data[string(fh)]
	delete(h.data, string(fh))
	h.mu.Unlock()
	if mode&state.Writeback != 0 && data != nil {
		res, err := s.NFS().Write(ctx, fh, 0, data, nfs3.FileSync)
		if err != nil || res.Status != nfs3.OK {
			return state.Failed
		}
	}
	return state.OK
}

// TestSNFSPermitCreatedFileHolder: a file a REINTEGRATE creates is on record
// as its creator's closed dirty cache (docs/protocol.md section 21.3): another
// client's OPEN calls the creator back for its write-back before it is
// answered, and reads the data the creator had only in its cache.
func TestSNFSPermitCreatedFileHolder(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	h := &createdHolder{data: map[string][]byte{}}
	a := dialSNFS(t, e, "permit-created-a", h)
	h.mu.Lock()
	h.s = a
	h.mu.Unlock()
	b := dialSNFS(t, e, "permit-created-b", nil)
	p := getPermit(t, a, D)
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "f", 1)})
	if err != nil || len(res.Results) != 1 || res.Results[0].Status != nfs3.OK {
		t.Fatalf("REINTEGRATE: %+v %v", res, err)
	}
	fh := res.Results[0].Obj
	want := []byte("written under the permit, still in the holder's cache")
	h.mu.Lock()
	h.data[string(fh)] = want
	h.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	bfh, _, err := b.OpenName(cctx, D, "f", state.Read)
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	calls := append([]state.CallbackMode(nil), h.calls...)
	h.mu.Unlock()
	// OPEN_NAME's lookup recalls the creator's permit on D first (section
	// 21.4, "Reads recall too"); then the open calls it back for the file.
	if len(calls) < 2 || calls[0] != state.RecallPermit {
		t.Fatalf("the creator was called back with %v; want the permit's recall, then a write-back", calls)
	}
	if calls[1] == state.RecallPermit || calls[1]&state.Writeback == 0 {
		t.Fatalf("the creator was called back with %v; want a write-back", calls[1])
	}
	rr, err := b.NFS().Read(cctx, bfh, 0, 4096)
	ok(t, "READ", rr.Status, err)
	if !bytes.Equal(rr.Data, want) {
		t.Fatalf("the other client read %q; want %q", rr.Data, want)
	}
	if _, err := b.Close(cctx, bfh, state.Read, false); err != nil {
		t.Fatal(err)
	}

}
