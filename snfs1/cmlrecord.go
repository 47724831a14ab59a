package snfs1

import "snfs/xdr"

// Encode implements xdr.Encoder: the record alone, as cmlrec1. A client
// keeps its modification log on disk in this form (mount/cml), so that what
// it logs and what it sends are one vocabulary and one codec.
func (c *CMLRecord) Encode(w *xdr.Writer) { c.encode(w) }

// Decode implements xdr.Decoder: one cmlrec1, bounded as REINTEGRATE's
// records are (names at most nfs3.MaxName bytes, a target nfs3.MaxPath, a
// handle nfs3.FHSize, no provisional id 0, a known op). Handles alias the
// reader's buffer; names are copies.
func (c *CMLRecord) Decode(r *xdr.Reader) error {
	c.decode(r)
	return r.Err()
}
