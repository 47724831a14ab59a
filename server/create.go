package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// create is CREATE (RFC 1813 section 3.3.8): make a regular file, UNCHECKED,
// GUARDED or EXCLUSIVE (the verifier is kept so a retransmission succeeds).
func (s *Server) create(ctx context.Context, c *sunrpc.Call, a *nfs3.CreateArgs, res *nfs3.CreateRes) {
	r, err := s.resolveWrite(c, a.Where.Dir)
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	defer r.release()
	res.DirWcc.Before = wccAttr(&r.node.Stat)
	err = s.doCreate(r, a, res)
	res.DirWcc.After = r.attr()
	res.Status = statusOf(err)
}

func (s *Server) doCreate(r *req, a *nfs3.CreateArgs, res *nfs3.CreateRes) error {
	if err := checkName(a.Where.Name); err != nil {
		return err
	}
	mode, how := uint32(0o600), store.CreateExclusive
	switch a.Mode {
	case nfs3.Unchecked:
		how = store.CreateUnchecked
	case nfs3.Guarded:
		how = store.CreateGuarded
	}
	if a.Mode != nfs3.Exclusive {
		mode = 0o644
		if a.Attr.Mode != nil {
			mode = *a.Attr.Mode
		}
	}
	var cr store.CreateResult
	err := store.As(r.cred, func() (err error) {
		cr, err = s.store.Create(r.node, a.Where.Name, mode, how, a.Verf)
		return err
	})
	if err != nil {
		return err
	}
	res.Object, res.Attr = cr.Handle, fattr(&cr.Stat, r.fsid())
	if a.Mode != nfs3.Exclusive {
		rest := a.Attr
		if cr.Created {
			rest.Mode = nil
		}
		if rest.Mode != nil || rest.UID != nil || rest.GID != nil || rest.Size != nil ||
			rest.Atime.How != nfs3.DontChange || rest.Mtime.How != nfs3.DontChange {
			if err := s.setNew(r, cr.Handle, &rest, res); err != nil {
				return err
			}
		}
	}
	return s.commitNew(r, cr.Handle)
}

// setNew applies sa to the object just made under r's directory and refreshes
// res.Attr.
func (s *Server) setNew(r *req, fh []byte, sa *nfs3.Sattr, res *nfs3.CreateRes) error {
	n, err := s.store.Resolve(fh)
	if err != nil {
		return err
	}
	nr := &req{node: n, exp: r.exp, opts: r.opts, cred: r.cred}
	defer nr.release()
	err = s.applySattr(nr, sa, true)
	res.Attr = nr.attr()
	return err
}

// makeNode is the common body of MKDIR, SYMLINK and MKNOD: resolve the directory,
// check the name, run mk with the caller's identity, apply the remaining
// attributes, flush the directory, and fill res.
func (s *Server) makeNode(c *sunrpc.Call, where *nfs3.DirOpArgs, sa *nfs3.Sattr, res *nfs3.CreateRes,
	mk func(r *req) ([]byte, unix.Stat_t, error)) {
	r, err := s.resolveWrite(c, where.Dir)
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	defer r.release()
	res.DirWcc.Before = wccAttr(&r.node.Stat)
	err = func() error {
		if err := checkName(where.Name); err != nil {
			return err
		}
		var fh []byte
		var st unix.Stat_t
		err := store.As(r.cred, func() (err error) {
			fh, st, err = mk(r)
			return err
		})
		if err != nil {
			return err
		}
		res.Object, res.Attr = fh, fattr(&st, r.fsid())
		if sa != nil && (sa.UID != nil || sa.GID != nil || sa.Atime.How != nfs3.DontChange || sa.Mtime.How != nfs3.DontChange) {
			rest := *sa
			rest.Mode, rest.Size = nil, nil
			if err := s.setNew(r, fh, &rest, res); err != nil {
				return err
			}
		}
		return s.commitNew(r, fh)
	}()
	res.DirWcc.After = r.attr()
	res.Status = statusOf(err)
}
