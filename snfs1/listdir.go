package snfs1

import (
	"snfs/nfs3"
	"snfs/xdr"
)

// ListDirArgs is LISTDIR1args (docs/protocol.md, "LISTDIR"): READDIRPLUS3args
// and the client id whose directory promise it asks for.
type ListDirArgs struct {
	Client ClientID
	nfs3.ReaddirplusArgs
}

// Encode implements xdr.Encoder.
func (a *ListDirArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	a.ReaddirplusArgs.Encode(w)
}

// Decode implements xdr.Decoder. Dir aliases the reader's buffer.
func (a *ListDirArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	return a.ReaddirplusArgs.Decode(r)
}

// ListDirRes is LISTDIR1res: a failure is its status alone; on success,
// whether the client holds the directory's promise once this reply is
// received, and READDIRPLUS3resok (bounded by nfs3.MaxEntries entries, as
// READDIRPLUS's).
type ListDirRes struct {
	Status Status
	// Promised: the client holds the promise (docs/protocol.md, "Directory
	// promises"); false: the listing may be used, not cached.
	Promised bool
	Dir      nfs3.ReaddirRes // when OK: its Status is OK, Plus set
}

// SetStatus sets the status of a failure result.
func (x *ListDirRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *ListDirRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status != 0 {
		return
	}
	w.Bool(x.Promised)
	// READDIRPLUS3resok is READDIRPLUS3res without its status.
	at := w.Len()
	x.Dir.Plus, x.Dir.Status = true, nfs3.OK
	x.Dir.Encode(w)
	b := w.Bytes()
	copy(b[at:], b[at+4:])
	w.Truncate(len(b) - 4)
}

// Decode implements xdr.Decoder. The entries do not alias the reader's
// buffer.
func (x *ListDirRes) Decode(r *xdr.Reader) error {
	x.Dir = nfs3.ReaddirRes{Plus: true}
	if x.Status = decodeStatus(r); x.Status != 0 || r.Err() != nil {
		return r.Err()
	}
	x.Promised = r.Bool()
	if r.Err() != nil {
		return r.Err()
	}
	ok := append(make([]byte, 4, 4+r.Remaining()), r.Rest()...) // status NFS3_OK, then resok
	dr := xdr.NewReader(ok)
	if err := x.Dir.Decode(dr); err != nil {
		r.SetErr(err)
		return err
	}
	r.FixedOpaque(dr.Offset() - 4)
	return r.Err()
}
