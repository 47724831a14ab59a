package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
	"snfs/sunrpc"
)

// setXattr is SETXATTR (docs/protocol.md, "SETXATTR"; RFC 8276 section
// 8.4.3): create or replace one extended attribute of the user namespace
// (SETXATTR1_CREATE: EXIST if it exists; SETXATTR1_REPLACE: NOXATTR if it
// does not), with the caller's identity (the kernel checks write
// permission). The change is durable before the reply (the object is
// fsynced, as SETATTR's change is), and the reply carries the file's
// wcc_data (its ctime moved).
func (s *Server) setXattr(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.SetXattrArgs, res *snfs1.SetXattrRes) {
	if err := checkXattrName(a.Name); err != nil {
		res.Status = statusOf(err)
		return
	}
	flag := store.XattrFlag(0)
	switch a.Option {
	case snfs1.XattrCreate:
		flag = unix.XATTR_CREATE
	case snfs1.XattrReplace:
		flag = unix.XATTR_REPLACE
	}
	res.Wcc.Before = wccAttr(&r.node.Stat)
	err := store.As(r.cred, func() error { return s.store.SetXattr(r.node, a.Name, a.Value, flag) })
	res.Status, res.Wcc.After = s.xattrChanged(r, err)
}

// xattrChanged ends SETXATTR and REMOVEXATTR: on success the change is made
// durable; the attributes after it are returned either way (a failure
// encodes only its status).
func (s *Server) xattrChanged(r *req, err error) (snfs1.Status, *nfs3.Fattr) {
	if err == nil {
		err = s.commitObj(r)
	}
	if err != nil {
		return statusOf(err), r.attr()
	}
	return 0, r.attr()
}

// xattrAccess: a change of a regular file's extended attributes is, for the
// consistency table, a WRITE of the file (docs/protocol.md, "SETXATTR"):
// clients that may cache the file (and its attributes) are called back
// first, and unless the caller's writes of the file are covered (it has it
// open for writing, or is its last writer), the caller holds it as a plain
// writer for the plain-access hold, so that no OPEN granted before the change
// is applied caches the attributes from before it.
func xattrAccess[A any](fh func(*A) []byte) func(s *Server, c *sunrpc.Call, r *req, a *A) []fileAccess {
	return func(s *Server, c *sunrpc.Call, r *req, a *A) []fileAccess {
		return regularAccess(r, fh(a), state.AccessWrite)
	}
}
