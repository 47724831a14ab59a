package server

import (
	"context"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// Reply overhead of READDIR/READDIRPLUS outside the entries: status, post_op_attr,
// cookie verifier, end-of-list marker and eof.
const readdirOverhead = 4 + 4 + 84 + nfs3.CookieVerfSize + 4 + 4

// readdir is READDIR (RFC 1813 section 3.3.16). Cookies are the file system's own
// directory offsets; the cookie verifier is always zero (the RFC's "not used"), and
// any verifier a client sends back is accepted, so a client can never be caught in
// a loop of NFS3ERR_BAD_COOKIE: a cookie stays meaningful for as long as the
// directory exists.
func (s *Server) readdir(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.ReaddirArgs, res *nfs3.ReaddirRes) {
	s.listDir(c, r, a.Cookie, a.Count, a.Count, false, res)
}

// listDir fills res with the entries of the directory r starting after cookie.
// dirCount bounds the bytes of the entry3 parts, maxCount the whole reply (they are
// equal for READDIR).
func (s *Server) listDir(c *sunrpc.Call, r *req, cookie uint64, dirCount, maxCount uint32, plus bool, res *nfs3.ReaddirRes) {
	res.Plus = plus
	maxCount = min(maxCount, maxReply(c))
	dirCount = min(dirCount, maxCount)
	budget, dirBudget := int(maxCount)-readdirOverhead, int(dirCount)-readdirOverhead
	var eof bool
	var attrs *store.ChildAttrs
	err := store.As(r.cred, func() (err error) {
		// A dirent64 is about as large as the entry3 it becomes; an entryplus3 is
		// about five times larger, so with READDIRPLUS maxcount is usually the
		// tighter budget. Read little more than will fit.
		bufSize := dirBudget
		if plus {
			bufSize = min(bufSize, budget/4)
			attrs = s.store.ChildAttrs(r.node)
		}
		eof, err = s.store.ReadDir(r.node, cookie, bufSize+512, func(de store.DirEntry) bool {
			e := nfs3.Entry{FileID: de.Ino, Name: de.Name, Cookie: de.Cookie}
			dsize := nfs3.EntrySize(&e, false)
			if plus {
				if fh, st, err := attrs.Get(de); err == nil {
					e.Handle, e.Attr = fh, fattr(&st, r.fsid())
					e.FileID = st.Ino
				}
			}
			size := nfs3.EntrySize(&e, plus)
			if size > budget || dsize > dirBudget {
				return false
			}
			budget -= size
			dirBudget -= dsize
			res.Entries = append(res.Entries, e)
			return true
		})
		return err
	})
	if attrs != nil {
		attrs.Done()
	}
	if attrs != nil && r.exp.metrics != nil {
		r.exp.metrics.AttrHits.Add(float64(attrs.Hits))
		r.exp.metrics.AttrMisses.Add(float64(attrs.Misses))
	}
	res.DirAttr = r.attr()
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	if len(res.Entries) == 0 && !eof {
		res.Status = nfs3.ErrTooSmall
		return
	}
	res.EOF = eof
}
