package snfs1

import (
	"snfs/nfs3"
	"snfs/xdr"
)

// DirReleaseMax is SNFS_DIR_RELEASE_MAX: the most directories one
// DIR_RELEASE gives back.
const DirReleaseMax = 256

// DirReleaseArgs is DIR_RELEASE1args (docs/protocol.md, "DIR_RELEASE"): the
// directory promises a client gives back. The result is a status alone
// (StatusRes).
type DirReleaseArgs struct {
	Client ClientID
	Dirs   []nfs3.FH
}

// Encode implements xdr.Encoder.
func (a *DirReleaseArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Uint32(uint32(len(a.Dirs)))
	for _, fh := range a.Dirs {
		w.Opaque(fh)
	}
}

// Decode implements xdr.Decoder. The handles alias the reader's buffer.
func (a *DirReleaseArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	n := r.Uint32()
	if r.Err() == nil && n > DirReleaseMax {
		r.SetErr(xdr.ErrTooLong)
	}
	if r.Err() != nil {
		return r.Err()
	}
	a.Dirs = make([]nfs3.FH, 0, n)
	for range n {
		fh := nfs3.DecodeFH(r)
		if r.Err() != nil {
			break
		}
		a.Dirs = append(a.Dirs, fh)
	}
	return r.Err()
}

// DirReleaseRes is DIR_RELEASE1res.
type DirReleaseRes = StatusRes
