package client

import (
	"context"
	"fmt"

	"snfs/nfs3"
	"snfs/snfs1"
)

// ListDir is SNFS LISTDIR (docs/protocol.md section 4.19): one page of
// READDIRPLUS of dir (from cookie, with cookieVerf), and whether the client
// holds dir's directory promise once the reply came. A promise is broken by a
// CB_CALLBACK INVALIDATE with dir's handle, delivered to the session's
// CallbackHandler like a file's; section 20 says when a listing may be cached
// (every page promised, no break of dir between sending the first page's call
// and receiving the last page's reply, the session's lease). Errors and
// retries are as Open's.
func (s *Session) ListDir(ctx context.Context, dir nfs3.FH, cookie uint64, cookieVerf [nfs3.CookieVerfSize]byte,
	dirCount, maxCount uint32) (*snfs1.ListDirRes, error) {
	return s.ListDirAs(ctx, nil, dir, cookie, cookieVerf, dirCount, maxCount)
}

// ListDirAs is ListDir with as's credentials (an NFS client of this
// session's connection, NFS().As: the user the listing is for, whose
// permission the server checks as for READDIRPLUS); nil: the session's own.
// The call goes on the session's connection either way, so the promise is
// this client's.
func (s *Session) ListDirAs(ctx context.Context, as *NFS, dir nfs3.FH, cookie uint64, cookieVerf [nfs3.CookieVerfSize]byte,
	dirCount, maxCount uint32) (*snfs1.ListDirRes, error) {
	rpc := s.rpc
	if as != nil {
		rpc = as.Program(snfs1.Program, snfs1.Version)
	}
	var res snfs1.ListDirRes
	err := s.retry(ctx, "LISTDIR", dir, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		res = snfs1.ListDirRes{}
		args := &snfs1.ListDirArgs{Client: id, ReaddirplusArgs: nfs3.ReaddirplusArgs{Dir: dir, Cookie: cookie,
			CookieVerf: cookieVerf, DirCount: dirCount, MaxCount: maxCount}}
		err := rpc.Call(ctx, snfs1.ProcListDir, args, &res)
		return res.Status, err
	})
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// DirRelease is SNFS DIR_RELEASE (docs/protocol.md section 4.20): the client
// gives back its promises on dirs (at most snfs1.DirReleaseMax). Errors and
// retries are as Open's.
func (s *Session) DirRelease(ctx context.Context, dirs []nfs3.FH) error {
	if len(dirs) > snfs1.DirReleaseMax {
		return fmt.Errorf("snfs DIR_RELEASE: %d directories, at most %d", len(dirs), snfs1.DirReleaseMax)
	}
	var fh nfs3.FH
	if len(dirs) > 0 {
		fh = dirs[0]
	}
	return s.retry(ctx, "DIR_RELEASE", fh, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		var res snfs1.DirReleaseRes
		err := s.rpc.Call(ctx, snfs1.ProcDirRelease, &snfs1.DirReleaseArgs{Client: id, Dirs: dirs}, &res)
		return res.Status, err
	})
}

// ConnectionsLost counts the session's registered connections that have
// closed. A client holding directory promises drops them all when it moves
// (docs/protocol.md section 20.4: a break written to the old connection may
// be lost).
func (s *Session) ConnectionsLost() uint64 { return s.connLost.Load() }
