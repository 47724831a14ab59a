package server

import (
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
	"snfs/sunrpc"
	"snfs/xdr"
)

// Directory promises (docs/protocol.md section 20): the objects each change
// touches, whose promises it breaks before it is answered. A row's Changes
// runs before its handler (to look up what the change will remove, while it
// is there, when a promise may list it) and returns what to break once the
// handler has run: the directories whose entries changed and the objects
// whose attributes changed. Failed changes touch nothing.

// afterBreaks answers a change once the promises it broke have been given
// back: the breaks of fhs are applied to the table, and the reply (encode) is
// written now if none is out, else deferred until they end (the call's worker
// is freed meanwhile). In a reply already deferred (deferred: the call waited
// for file callbacks first) it waits for them on the goroutine that delivers
// it (consist's), no longer than the callback deadline or the driver's stop.
func (s *Server) afterBreaks(c *sunrpc.Call, w *xdr.Writer, deferred bool, fhs [][]byte, encode func(*xdr.Writer) error) error {
	caller := s.consist.Caller(c)
	if deferred {
		ch := make(chan struct{})
		s.consist.DirChanged(caller, fhs, func() { close(ch) })
		select {
		case <-ch:
		case <-s.consist.Done():
		}
		return encode(w)
	}
	_, err := later(c, w, nil, func(done func(error)) {
		s.consist.DirChanged(caller, fhs, func() { done(nil) })
	}, func(w *xdr.Writer, _ error, _ bool) error {
		if w == nil {
			return nil
		}
		return encode(w)
	})
	return err
}

// DirStats returns the directory promises' counters (docs/protocol.md
// section 20).
func (s *Server) DirStats() state.DirStats { return s.consist.DirStats() }

// handleIn returns the handle of what name names in the directory r, or nil.
func (s *Server) handleIn(r *req, name string) []byte {
	if checkName(name) != nil {
		return nil
	}
	var fh []byte
	if store.As(r.cred, func() (err error) { fh, _, err = s.store.Lookup(r.node, name); return err }) != nil {
		return nil
	}
	return fh
}

// createChanges: CREATE, MKDIR, SYMLINK, MKNOD change the directory's
// entries, and an UNCHECKED CREATE of an existing file its attributes.
func createChanges(dir nfs3.FH) func(*nfs3.CreateRes) [][]byte {
	return func(res *nfs3.CreateRes) [][]byte {
		if res.Status != nfs3.OK {
			return nil
		}
		return [][]byte{dir, res.Object}
	}
}

func createRowChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.CreateArgs) func(*nfs3.CreateRes) [][]byte {
	return createChanges(a.Where.Dir)
}

func mkdirChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.MkdirArgs) func(*nfs3.CreateRes) [][]byte {
	return createChanges(a.Where.Dir)
}

func symlinkChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.SymlinkArgs) func(*nfs3.CreateRes) [][]byte {
	return createChanges(a.Where.Dir)
}

func mknodChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.MknodArgs) func(*nfs3.CreateRes) [][]byte {
	return createChanges(a.Where.Dir)
}

// removeChanges: REMOVE changes the directory's entries and the removed
// object's link count (a promise on another directory may list it: a hard
// link). The object is looked up only while a promise exists.
func removeChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.DirOpArgs) func(*nfs3.WccRes) [][]byte {
	var obj []byte
	if s.consist.DirsActive() {
		obj = s.handleIn(r, a.Name)
	}
	return wccChanges(a.Dir, obj)
}

// rmdirChanges: RMDIR changes the directory's entries and ends the removed
// directory: a promise on it is broken too. Always looked up (RMDIR is rare):
// a promise on it granted while the RMDIR runs must not survive it.
func rmdirChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.DirOpArgs) func(*nfs3.WccRes) [][]byte {
	return wccChanges(a.Dir, s.handleIn(r, a.Name))
}

func wccChanges(fhs ...[]byte) func(*nfs3.WccRes) [][]byte {
	return func(res *nfs3.WccRes) [][]byte {
		if res.Status != nfs3.OK {
			return nil
		}
		return fhs
	}
}

// setattrChanges: SETATTR changes the object's attributes (a directory's
// own are part of its promise).
func setattrChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.SetattrArgs) func(*nfs3.WccRes) [][]byte {
	return wccChanges(a.Object)
}

// renameChanges: RENAME changes both directories' entries, the moved object
// (its change time; a directory's ".."), and the object it replaces (its
// link count, or its end).
func renameChanges(s *Server, c *sunrpc.Call, from *req, a *nfs3.RenameArgs) func(*nfs3.RenameRes) [][]byte {
	var moved, replaced []byte
	if s.consist.DirsActive() {
		moved = s.handleIn(from, a.From.Name)
		if to, err := s.resolve(c, a.To.Dir); err == nil {
			replaced = s.handleIn(to, a.To.Name)
			to.release()
		}
	}
	return func(res *nfs3.RenameRes) [][]byte {
		if res.Status != nfs3.OK {
			return nil
		}
		return [][]byte{a.From.Dir, a.To.Dir, moved, replaced}
	}
}

// linkChanges: LINK changes the new name's directory and the file's link
// count.
func linkChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.LinkArgs) func(*nfs3.LinkRes) [][]byte {
	return func(res *nfs3.LinkRes) [][]byte {
		if res.Status != nfs3.OK {
			return nil
		}
		return [][]byte{a.Link.Dir, a.File}
	}
}

// writeChanges: WRITE changes the file's size and times.
func writeChanges(s *Server, c *sunrpc.Call, r *req, a *nfs3.WriteArgs) func(*nfs3.WriteRes) [][]byte {
	return func(res *nfs3.WriteRes) [][]byte {
		if res.Status != nfs3.OK {
			return nil
		}
		return [][]byte{a.File}
	}
}

// appendChanges and allocateChanges: APPEND and ALLOCATE change the file's
// size and times, as WRITE.
func appendChanges(s *Server, c *sunrpc.Call, r *req, a *snfs1.AppendArgs) func(*snfs1.AppendRes) [][]byte {
	return func(res *snfs1.AppendRes) [][]byte {
		if res.Status != nfs3.OK {
			return nil
		}
		return [][]byte{a.File}
	}
}

func allocateChanges(s *Server, c *sunrpc.Call, r *req, a *snfs1.AllocateArgs) func(*snfs1.AllocateRes) [][]byte {
	return func(res *snfs1.AllocateRes) [][]byte {
		if res.Status != nfs3.OK {
			return nil
		}
		return [][]byte{a.File}
	}
}

// PermitStats returns the write-back permits' counters (docs/protocol.md
// section 21).
func (s *Server) PermitStats() state.PermitStats { return s.consist.PermitStats() }
