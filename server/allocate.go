package server

import (
	"context"
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
	"snfs/sunrpc"
)

// allocateProc is ALLOCATE (docs/protocol.md, "ALLOCATE"): NFSv4.2's
// ALLOCATE and DEALLOCATE (RFC 7862 sections 15.1 and 15.4), as fallocate(2)
// on the server's file. ALLOC_ALLOCATE and ALLOC_KEEP_SIZE reserve the
// range's blocks on the server's file system, so the space is there for the
// client's later writes (and ENOSPC is answered now, not at a write-back);
// ALLOC_ALLOCATE also extends the size to the range's end. ALLOC_DEALLOCATE
// punches a hole: the range reads as zeros, its blocks are freed, the size
// stays. The change is made durable before the reply (one fsync, through
// the file's gathered flushes, as a stable WRITE's), except on an async
// export, where it is metadata answered before it is on disk as SETATTR's.
// The reply carries the attributes after the change.
func (s *Server) allocateProc(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.AllocateArgs, res *snfs1.AllocateRes) {
	after, err := s.doAllocate(c, r, a)
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	res.Attr = after
}

// allocateCheck: fallocate(2)'s argument errors, before the handle is
// resolved: an empty range is EINVAL, one past the largest offset EFBIG.
func allocateCheck(a *snfs1.AllocateArgs) error {
	switch {
	case a.Length == 0:
		return fmt.Errorf("%w: empty range", nfs3.ErrInval)
	case a.Offset > math.MaxInt64 || a.Length > math.MaxInt64-a.Offset:
		return fmt.Errorf("%w: range beyond the largest offset", nfs3.ErrFBig)
	}
	return nil
}

// fallocMode is the fallocate(2) mode of an allocation mode.
func fallocMode(m snfs1.AllocMode) uint32 {
	switch m {
	case snfs1.AllocateKeepSize:
		return unix.FALLOC_FL_KEEP_SIZE
	case snfs1.Deallocate:
		return unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	}
	return 0
}

func (s *Server) doAllocate(c *sunrpc.Call, r *req, a *snfs1.AllocateArgs) (*nfs3.Fattr, error) {
	if err := regularFile(r); err != nil {
		return nil, err
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return nil, err
	}
	if err := store.As(r.cred, func() error { return s.store.MayIO(r.node, r.cred.UID, true) }); err != nil {
		return nil, err
	}
	// As WRITE (write.go): fallocate by anyone but root clears the set-ID
	// bits, as the kernel's fallocate does for a caller without CAP_FSETID.
	if r.cred.UID != 0 {
		if err := s.store.ClearSetID(r.node); err != nil {
			return nil, err
		}
	}
	mode, off, n := fallocMode(a.Mode), int64(a.Offset), int64(a.Length)
	if r.opts.Async {
		if err := s.store.Allocate(r.node, mode, off, n); err != nil {
			return nil, err
		}
		return r.attr(), nil
	}
	ticket := r.exp.gather.Begin(r.node.Key())
	if err := s.store.Allocate(r.node, mode, off, n); err != nil {
		ticket.Cancel()
		return nil, err
	}
	// A full fsync: the allocation and the size are metadata, which
	// fdatasync need not write on every file system.
	return s.waitFlush(c, r, ticket, false)
}

// allocateAccess: an ALLOCATE changes the file as a WRITE does (its size, or
// its data for DEALLOCATE).
func allocateAccess(s *Server, c *sunrpc.Call, r *req, a *snfs1.AllocateArgs) []fileAccess {
	return regularAccess(r, a.File, state.AccessWrite)
}
