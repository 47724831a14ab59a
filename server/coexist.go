package server

import (
	"syscall"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/state"
	"snfs/store"
	"snfs/sunrpc"
)

// fileAccess is one regular file an NFSv3 call reads or changes, as the
// consistency table sees it (Spritely NFS section 6.1).
type fileAccess struct {
	fh   []byte
	kind state.AccessKind
}

// admit applies accs in order to the consistency table for client, and calls
// done once: nil when the call may go ahead (perhaps after callbacks), else why
// not.
func (s *Server) admit(client state.ClientID, accs []fileAccess, done func(error)) {
	s.admitBy(s.consist.Access, client, accs, done)
}

// admitBy is admit through access: consist's Access, or its BatchAccess
// for a REINTEGRATE record (never answered NFS3ERR_JUKEBOX for the time
// callbacks take).
func (s *Server) admitBy(access func(state.ClientID, []byte, state.AccessKind, func(error)), client state.ClientID, accs []fileAccess, done func(error)) {
	var step func(i int)
	step = func(i int) {
		if i == len(accs) {
			done(nil)
			return
		}
		access(client, accs[i].fh, accs[i].kind, func(err error) {
			if err != nil {
				done(err)
				return
			}
			step(i + 1)
		})
	}
	step(0)
}

// The Access functions of the table rows (op.Access): which regular files a call
// reads or changes. Calls that fail their own checks later touch nothing, so
// naming one more file than the call ends up touching costs at most a callback.

// getattrAccess: a GETATTR of a regular file waits for other clients' dirty
// blocks to be written back, so that the size and times it returns are
// current (state.AccessGetattr); it records nothing.
func getattrAccess(s *Server, c *sunrpc.Call, r *req, a *nfs3.FHArgs) []fileAccess {
	return regularAccess(r, a.FH, state.AccessGetattr)
}

// accessAccess: ACCESS of a regular file is gated as GETATTR is: its reply
// carries the file's attributes, and a plain client's open revalidates with
// ACCESS alone (close-to-open), taking that size as the file's.
func accessAccess(s *Server, c *sunrpc.Call, r *req, a *nfs3.AccessArgs) []fileAccess {
	return regularAccess(r, a.Object, state.AccessGetattr)
}

func readAccess(s *Server, c *sunrpc.Call, r *req, a *nfs3.ReadArgs) []fileAccess {
	return regularAccess(r, a.File, state.AccessRead)
}

func writeAccess(s *Server, c *sunrpc.Call, r *req, a *nfs3.WriteArgs) []fileAccess {
	return regularAccess(r, a.File, state.AccessWrite)
}

// setattrAccess: a SETATTR of the size changes the data others cache, one of
// the mode or owner what they may do with it: the dirty blocks of other
// clients are written back (as their writers, while the old mode still lets
// them) and their opens kept past the close are taken back, so that their
// next open is checked against the new mode (docs/protocol.md section 14).
// A mode or owner set to what it is already changes nothing (tar, cp -p and
// rsync set them whether or not they differ).
func setattrAccess(s *Server, c *sunrpc.Call, r *req, a *nfs3.SetattrArgs) []fileAccess {
	if a.New.Size == nil && !permChange(&a.New, &r.node.Stat) {
		return nil
	}
	return regularAccess(r, a.Object, state.AccessSetattr)
}

// permChange reports whether sa changes st's mode, owner or group.
func permChange(sa *nfs3.Sattr, st *unix.Stat_t) bool {
	return sa.Mode != nil && *sa.Mode&0o7777 != st.Mode&0o7777 ||
		sa.UID != nil && *sa.UID != st.Uid ||
		sa.GID != nil && *sa.GID != st.Gid
}

// createAccess: an UNCHECKED CREATE of an existing file sets its attributes
// (RFC 1813 section 3.3.8), its size included: a truncation like SETATTR's.
func createAccess(s *Server, c *sunrpc.Call, r *req, a *nfs3.CreateArgs) []fileAccess {
	if a.Mode != nfs3.Unchecked || a.Attr.Size == nil {
		return nil
	}
	if fh := s.regularIn(r, a.Where.Name); fh != nil {
		return []fileAccess{{fh, state.AccessSetattr}}
	}
	return nil
}

func removeAccess(s *Server, c *sunrpc.Call, r *req, a *nfs3.DirOpArgs) []fileAccess {
	if fh := s.regularIn(r, a.Name); fh != nil {
		return []fileAccess{{fh, state.AccessRemove}}
	}
	return nil
}

// renameAccess: the file renamed, and the one the new name replaces.
func renameAccess(s *Server, c *sunrpc.Call, from *req, a *nfs3.RenameArgs) []fileAccess {
	var accs []fileAccess
	if fh := s.regularIn(from, a.From.Name); fh != nil {
		accs = append(accs, fileAccess{fh, state.AccessRename})
	}
	if to, err := s.resolve(c, a.To.Dir); err == nil {
		if fh := s.regularIn(to, a.To.Name); fh != nil {
			accs = append(accs, fileAccess{fh, state.AccessRemove})
		}
		to.release()
	}
	return accs
}

func regularAccess(r *req, fh nfs3.FH, kind state.AccessKind) []fileAccess {
	if r.node.Stat.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil
	}
	return []fileAccess{{append([]byte(nil), fh...), kind}}
}

// regularIn returns the handle of the regular file name names in the directory
// r, or nil.
func (s *Server) regularIn(r *req, name string) []byte { return s.typeIn(r, name, syscall.S_IFREG) }

// typeIn is the handle of r's directory's entry name when it is of type
// typ (an S_IFMT value), or nil (no such entry, another type, a name the
// store refuses).
func (s *Server) typeIn(r *req, name string, typ uint32) []byte {
	if checkName(name) != nil {
		return nil
	}
	var fh []byte
	var st unix.Stat_t
	if store.As(r.cred, func() (err error) { fh, st, err = s.store.Lookup(r.node, name); return err }) != nil ||
		st.Mode&syscall.S_IFMT != typ {
		return nil
	}
	return fh
}

// handleAttr returns the attributes of the file fh names, looked up with no
// client's rights (for the CALLBACK arguments), or nil.
func (s *Server) handleAttr(fh []byte) *nfs3.Fattr {
	var e *export
	n, err := s.store.ResolveFor(fh, func(se *store.Export) error {
		if e = s.table().byID[se.ID]; e == nil {
			return store.ErrStale
		}
		return nil
	})
	if err != nil {
		return nil
	}
	defer n.Release()
	return fattr(&n.Stat, e.st.ID)
}
