package server

import (
	"context"
	"math"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// setattr is SETATTR (RFC 1813 section 3.3.2): change attributes, optionally only if
// the object's ctime still equals the guard.
func (s *Server) setattr(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.SetattrArgs, res *nfs3.WccRes) {
	res.Wcc.Before = wccAttr(&r.node.Stat)
	if a.Guard != nil && nfsTime(r.node.Stat.Ctim) != *a.Guard {
		res.Status = nfs3.ErrNotSync
		res.Wcc.After = r.attr()
		return
	}
	err := s.applySattr(r, &a.New, true)
	if err == nil {
		err = s.commitObj(r)
	}
	res.Wcc.After = r.attr()
	res.Status = statusOf(err)
}

// applySattr applies sa to r's node with the caller's identity; mode is skipped
// unless withMode.
func (s *Server) applySattr(r *req, sa *nfs3.Sattr, withMode bool) error {
	if sa.Size != nil {
		if err := regularFile(r); err != nil {
			return err
		}
		if *sa.Size > math.MaxInt64 {
			return nfs3.ErrFBig
		}
		if err := s.store.OpenIO(r.node); err != nil {
			return err
		}
	}
	set := store.SetAttr{UID: sa.UID, GID: sa.GID, Atime: timeSpec(sa.Atime), Mtime: timeSpec(sa.Mtime)}
	if withMode {
		set.Mode = sa.Mode
	}
	return store.As(r.cred, func() error {
		if sa.Size != nil {
			if err := s.store.MayIO(r.node, r.cred.UID, true); err != nil {
				return err
			}
			if err := s.store.Truncate(r.node, int64(*sa.Size)); err != nil {
				return err
			}
		}
		return s.store.Setattr(r.node, set)
	})
}

func timeSpec(t nfs3.SetTime) *unix.Timespec {
	switch t.How {
	case nfs3.SetToServerTime:
		return &unix.Timespec{Nsec: unix.UTIME_NOW}
	case nfs3.SetToClientTime:
		return &unix.Timespec{Sec: int64(t.Time.Sec), Nsec: int64(t.Time.Nsec)}
	}
	return nil
}
