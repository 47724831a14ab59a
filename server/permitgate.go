package server

import (
	"syscall"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// Write-back permits (docs/protocol.md section 21.3): a change of a
// directory whose permit another client holds waits, before anything else,
// for the permit's recall to end - the holder reintegrates its logged
// changes of the directory first - and then goes through the plain-access
// rule (section 14) and its handler as any change does. The change is made
// after the holder's: a name the holder created exists when a plain client's
// CREATE runs.

// readDirs is the Dirs of a call that reads a directory (LOOKUP, READDIR,
// READDIRPLUS, GETATTR, LISTDIR, OPEN_NAME's lookup: docs/protocol.md
// section 21.4, "Reads recall too"): another client's permit on it is
// recalled first, so that the call sees every entry the holder's
// applications were told exists, and none they removed. A GETATTR's handle
// may name a file: no permit is on it.
func readDirs[A any](dir func(*A) nfs3.FH) func(*A) []nfs3.FH {
	return func(a *A) []nfs3.FH { return []nfs3.FH{dir(a)} }
}

// othersPermits keeps of dirs those on which a client other than the
// caller holds, or is being granted, a permit (nil: none). A permit
// granted after this check was granted after the read, which then sees the
// directory as it was before the holder's changes: as if it had come first.
func (s *Server) othersPermits(c *sunrpc.Call, dirs []nfs3.FH) []nfs3.FH {
	caller := s.consist.Caller(c)
	n := 0
	for _, fh := range dirs {
		if s.consist.PermitHeldByOther(caller, fh) {
			dirs[n] = fh
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return dirs[:n]
}

// permitGate recalls the permits on dirs held by clients other than the
// caller, then admits accs (the call's plain accesses); done is called once
// both are through. *recalled is set when the call waited for a recall.
func (s *Server) permitGate(c *sunrpc.Call, dirs []nfs3.FH, accs []fileAccess, recalled *bool, done func(error)) {
	caller := s.consist.Caller(c)
	fhs := make([][]byte, len(dirs))
	for i, fh := range dirs {
		fhs[i] = fh
	}
	s.consist.PermitGate(caller, fhs, func(waited bool, err error) {
		if err != nil {
			done(err)
			return
		}
		*recalled = waited // read by the reply's finish, which done orders after this
		s.admit(caller, accs, done)
	})
}

// admitMore admits, waiting on the calling goroutine (a deferred reply's,
// consist's), the accesses of now that before did not name: what a call
// that waited for a recall finds to remove or truncate once the holder's
// changes are in. It waits no longer than the callbacks' deadline or the
// driver's stop.
func (s *Server) admitMore(c *sunrpc.Call, before, now []fileAccess) error {
	var more []fileAccess
	for _, n := range now {
		seen := false
		for _, b := range before {
			if string(b.fh) == string(n.fh) && b.kind == n.kind {
				seen = true
				break
			}
		}
		if !seen {
			more = append(more, n)
		}
	}
	if len(more) == 0 {
		return nil
	}
	ch := make(chan error, 1)
	s.admit(s.consist.Caller(c), more, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-s.consist.Done():
		return nil
	}
}

// permitGraceGate decides a directory call (its Dirs) during the grace
// period after a restart (docs/protocol.md section 21.9): NFS3ERR_JUKEBOX
// while a client that may reclaim permits has not reclaimed yet, unless the
// caller holds the permit of every directory the call names (the
// reclaiming holder itself), or while another client holds one of their
// permits (reclaimed: recalled only once the grace period is over, when
// the holder's reintegration no longer waits for it). A GETATTR or SETATTR
// of an object that is not a directory names no directory.
func (s *Server) permitGraceGate(c *sunrpc.Call, r *req, fh nfs3.FH, dirs []nfs3.FH) error {
	fhs := make([][]byte, 0, len(dirs))
	for _, d := range dirs {
		if string(d) == string(fh) && r.node != nil && r.node.Stat.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			continue
		}
		fhs = append(fhs, d)
	}
	if len(fhs) == 0 {
		return nil
	}
	return s.consist.PermitGraceAdmit(s.consist.Caller(c), fhs)
}

// rmdirRemoved is RMDIR's Removed: the directory it removes, while any
// permit exists (another client's on it is recalled before the RMDIR).
func rmdirRemoved(s *Server, c *sunrpc.Call, r *req, a *nfs3.DirOpArgs) []nfs3.FH {
	if !s.consist.PermitsActive() {
		return nil
	}
	if fh := s.dirIn(r, a.Name); fh != nil {
		return []nfs3.FH{fh}
	}
	return nil
}

// renameRemoved is RENAME's Removed: the directory its target names (a
// RENAME of a directory over an empty one removes it), while any permit
// exists.
func renameRemoved(s *Server, c *sunrpc.Call, from *req, a *nfs3.RenameArgs) []nfs3.FH {
	if !s.consist.PermitsActive() {
		return nil
	}
	to, err := s.resolve(c, a.To.Dir)
	if err != nil {
		return nil
	}
	defer to.release()
	if fh := s.dirIn(to, a.To.Name); fh != nil {
		return []nfs3.FH{fh}
	}
	return nil
}

// dirIn returns the handle of the directory name names in the directory
// r, or nil.
func (s *Server) dirIn(r *req, name string) []byte { return s.typeIn(r, name, syscall.S_IFDIR) }
