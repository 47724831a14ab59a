package server

import (
	"context"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
	"snfs/xdr"
)

// maxIO is the largest READ or WRITE the server advertises and serves (FSINFO).
const maxIO = 1 << 20

// maxUDPReply bounds the data in one reply over UDP, which must fit a datagram.
const maxUDPReply = 56 << 10

// maxReply is how many bytes of data (READ) or entries (READDIR) one reply may
// carry on the call's transport: over UDP a reply must fit in one datagram, so a
// client asking for more gets a short READ (or a partial listing) and continues.
func maxReply(c *sunrpc.Call) uint32 {
	if c.Network == "udp" {
		return maxUDPReply
	}
	return maxIO
}

// read is READ (RFC 1813 section 3.3.6). It is the table's one Reply handler: it
// reads straight into the reply buffer instead of into a ReadRes.
func (s *Server) read(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.ReadArgs, w *xdr.Writer, _ bool) error {
	mark := w.Len()
	fail := func(err error, attr *nfs3.Fattr) error {
		w.Truncate(mark)
		(&nfs3.ReadRes{Status: statusOf(err), Attr: attr}).Encode(w)
		return nil
	}
	attr := fattr(&r.node.Stat, r.fsid())
	if err := regularFile(r); err != nil {
		return fail(err, attr)
	}
	if a.Offset > 1<<63-1 {
		return fail(nfs3.ErrInval, attr)
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return fail(err, attr)
	}
	if err := store.As(r.cred, func() error { return s.store.MayIO(r.node, r.cred.UID, false) }); err != nil {
		return fail(err, attr)
	}
	count := min(a.Count, maxReply(c))
	err := nfs3.EncodeReadOK(w, attr, count, func(buf []byte) (int, bool, error) {
		return s.store.ReadAt(r.node, buf, int64(a.Offset))
	})
	if err != nil {
		return fail(err, attr)
	}
	return nil
}
