package server

import (
	"context"
	"syscall"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// listDirProc is LISTDIR (docs/protocol.md section 4.19): READDIRPLUS under a
// directory promise. The promise is recorded before the directory is read,
// so that a change made while it is read breaks it (state.Dirs); it covers
// the entries and the attributes this reply lists. Promised only where the
// server sees local processes' changes (the export's file system reports
// them): elsewhere a local change would go unbroken.
func (s *Server) listDirProc(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.ListDirArgs, res *snfs1.ListDirRes) {
	mid, err := s.consist.Client(a.Client)
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	if r.node.Stat.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		res.Status = nfs3.ErrNotDir
		return
	}
	var tok uint64
	if r.exp.st.Notified() {
		// A local process's change completed before this LISTDIR, still in
		// the notifier's queue, is applied before the promise is recorded
		// (as an OPEN's is, tableOpen): it breaks only the promises older
		// than it. Drained by the read below (ChildAttrs), it broke the
		// promise being made, which reads after it: the client got none,
		// and the server's break of it refused the next LISTDIRs until
		// answered (a mount then looks names up one by one for a while).
		s.store.DrainChanges()
		tok, _ = s.consist.BeginList(mid, a.Dir)
	}
	s.listDir(c, r, a.Cookie, a.DirCount, a.MaxCount, true, &res.Dir)
	var listed [][]byte
	if tok != 0 && res.Dir.Status == nfs3.OK {
		listed = make([][]byte, 0, len(res.Dir.Entries))
		for i := range res.Dir.Entries {
			if e := &res.Dir.Entries[i]; e.Handle != nil && e.Attr != nil {
				listed = append(listed, e.Handle)
			}
		}
	}
	if res.Dir.Status != nfs3.OK {
		s.consist.FailList(tok) // a promise the client never learns of is taken back
		res.Status = res.Dir.Status
		return
	}
	promised := s.consist.EndList(tok, listed)
	res.Promised = promised
}
