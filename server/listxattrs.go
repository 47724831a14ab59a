package server

import (
	"context"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/store"
	"snfs/sunrpc"
)

// listXattrs is LISTXATTRS (docs/protocol.md, "LISTXATTRS"; RFC 8276 section
// 8.4.4): the names of the object's extended attributes of the user
// namespace, sorted, from the cookie's position on, as many as fit in
// maxcount bytes (at most SNFS_XATTR_LISTMAX); the reply's cookie is the
// position after its last name and eof says none follow. A cookie past the
// end is NFS3ERR_BAD_COOKIE; a maxcount too small for the next name
// NFS3ERR_TOOSMALL. Listing needs no permission on the object, as for a
// local process (listxattr(2)); it is no access for the consistency table.
func (s *Server) listXattrs(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.ListXattrsArgs, res *snfs1.ListXattrsRes) {
	var names []string
	if err := store.As(r.cred, func() (err error) {
		names, err = s.store.ListXattrs(r.node, snfs1.XattrPrefix)
		return err
	}); err != nil {
		res.Status = statusOf(err)
		return
	}
	if a.Cookie > uint64(len(names)) {
		res.Status = nfs3.ErrBadCookie
		return
	}
	budget := int(min(a.MaxCount, snfs1.XattrListMax))
	i := int(a.Cookie)
	for ; i < len(names); i++ {
		size := snfs1.XattrNameSize(names[i])
		if size > budget {
			break
		}
		budget -= size
		res.Names = append(res.Names, names[i])
	}
	if i < len(names) && len(res.Names) == 0 {
		res.Names, res.Status = nil, nfs3.ErrTooSmall
		return
	}
	res.Cookie, res.EOF = uint64(i), i == len(names)
}
