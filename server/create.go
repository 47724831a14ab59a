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
func (s *Server) create(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.CreateArgs, res *nfs3.CreateRes) {
	res.DirWcc.Before = wccAttr(&r.node.Stat)
	err := s.doCreate(r, a, res)
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
	obj := &made{dir: r, fh: cr.Handle}
	defer obj.release()
	if a.Mode != nfs3.Exclusive {
		rest := a.Attr
		if cr.Created {
			rest.Mode = nil
			if rest.Size != nil && *rest.Size == 0 {
				rest.Size = nil // a new file is empty already
			}
		}
		if rest.Mode != nil || rest.UID != nil || rest.GID != nil || rest.Size != nil ||
			rest.Atime.How != nfs3.DontChange || rest.Mtime.How != nfs3.DontChange {
			if err := s.setNew(obj, &rest, res); err != nil {
				return err
			}
		}
	}
	return s.commitNew(obj)
}

// made is an object a call just made in the directory dir (CREATE, MKDIR, SYMLINK,
// MKNOD). Its handle is resolved at most once, by the first of setting its
// attributes and flushing it that needs the node; release it when done.
type made struct {
	dir *req
	fh  []byte
	obj *req // nil until resolved
}

// resolveMade returns the object as a req with dir's export, options and identity.
func (s *Server) resolveMade(m *made) (*req, error) {
	if m.obj == nil {
		n, err := s.store.Resolve(m.fh)
		if err != nil {
			return nil, err
		}
		m.obj = &req{node: n, exp: m.dir.exp, opts: m.dir.opts, cred: m.dir.cred, commits: m.dir.commits}
	}
	return m.obj, nil
}

func (m *made) release() { m.obj.release() }

// setNew applies sa to the object just made and refreshes res.Attr.
func (s *Server) setNew(m *made, sa *nfs3.Sattr, res *nfs3.CreateRes) error {
	nr, err := s.resolveMade(m)
	if err != nil {
		return err
	}
	err = s.applySattr(nr, sa, true)
	res.Attr = nr.attr()
	return err
}

// makeNode is the common body of MKDIR, SYMLINK and MKNOD in the directory r:
// check the name, run mk with the caller's identity, apply the remaining
// attributes, flush the directory, and fill res.
func (s *Server) makeNode(r *req, where *nfs3.DirOpArgs, sa *nfs3.Sattr, res *nfs3.CreateRes,
	mk func(r *req) ([]byte, unix.Stat_t, error)) {
	res.DirWcc.Before = wccAttr(&r.node.Stat)
	err := func() error {
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
		obj := &made{dir: r, fh: fh}
		defer obj.release()
		if sa != nil && (sa.UID != nil || sa.GID != nil || sa.Atime.How != nfs3.DontChange || sa.Mtime.How != nfs3.DontChange) {
			rest := *sa
			rest.Mode, rest.Size = nil, nil
			if err := s.setNew(obj, &rest, res); err != nil {
				return err
			}
		}
		return s.commitNew(obj)
	}()
	res.DirWcc.After = r.attr()
	res.Status = statusOf(err)
}
