package client

import (
	"context"
	"fmt"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
)

// Back-off between retries of a call the server answered NFS3ERR_JUKEBOX (an
// OPEN whose callbacks to other clients are not done yet).
const (
	jukeboxFirst = 20 * time.Millisecond
	jukeboxMax   = time.Second
)

// Open is SNFS OPEN (docs/protocol.md, "OPEN"): one open of fh in mode, to be
// matched by one Close with the same mode. The result says whether the client
// may cache the file, and which cached data is still valid (cached at
// CacheVersion or OldCacheVersion).
//
// A status other than OK is a *StatusError. NFS3ERR_JUKEBOX (the server is
// still calling other clients back) is retried, each time as a new request,
// after 20 ms, doubling to at most 1 s, until ctx ends; SNFS_ERR_STALE_CLIENTID
// registers again and retries once with the new client id.
func (s *Session) Open(ctx context.Context, fh nfs3.FH, mode state.Mode) (*snfs1.OpenOK, error) {
	return s.open(ctx, s.rpc, fh, mode)
}

// OpenAs is Open with the credential of the application whose open it is
// (AUTH_SYS with uid, gid and groups, on the session's connection): the
// server checks the open's permission as that caller, squashed by the
// export's options (docs/protocol.md 4.2), not as the mount's process (root,
// which root_squash makes the anonymous user and no_root_squash lets do
// anything).
func (s *Session) OpenAs(ctx context.Context, uid, gid uint32, groups []uint32, fh nfs3.FH, mode state.Mode) (*snfs1.OpenOK, error) {
	return s.open(ctx, s.rpc.WithAuth(sunrpc.EncodeAuthSys(sunrpc.AuthSysParams{MachineName: "snfs-client", UID: uid, GID: gid, GIDs: groups})), fh, mode)
}

func (s *Session) open(ctx context.Context, rpc *sunrpc.Client, fh nfs3.FH, mode state.Mode) (*snfs1.OpenOK, error) {
	var res snfs1.OpenRes
	err := s.retry(ctx, "OPEN", fh, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		res = snfs1.OpenRes{}
		if err := s.handBacks.wait(ctx); err != nil {
			return 0, err
		}
		err := rpc.Call(ctx, snfs1.ProcOpen, &snfs1.OpenArgs{Client: id, File: fh, Mode: mode}, &res)
		return res.Status, err
	})
	if err != nil {
		return nil, err
	}
	return &res.OpenOK, nil
}

// OpenName is SNFS OPEN_NAME (docs/protocol.md, "OPEN_NAME"): LOOKUP of name
// in dir and OPEN of the regular file it names, in one round trip. It never
// creates (NFS3ERR_NOENT). It returns the file's handle; errors and retries
// are as Open's.
func (s *Session) OpenName(ctx context.Context, dir nfs3.FH, name string, mode state.Mode) (nfs3.FH, *snfs1.OpenOK, error) {
	var res snfs1.OpenNameRes
	err := s.retry(ctx, "OPEN_NAME", dir, name, func(id snfs1.ClientID) (snfs1.Status, error) {
		res = snfs1.OpenNameRes{}
		if err := s.handBacks.wait(ctx); err != nil {
			return 0, err
		}
		args := &snfs1.OpenNameArgs{Client: id, Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Mode: mode}
		err := s.rpc.Call(ctx, snfs1.ProcOpenName, args, &res)
		return res.Status, err
	})
	if err != nil {
		return nil, nil, err
	}
	return res.File, &res.OpenOK, nil
}

// Close is SNFS CLOSE (docs/protocol.md, "CLOSE"): it removes one open of fh in
// mode. dirty says the client still holds delayed writes of the file (the
// server will call it back for them); false says it holds none. It returns the
// file's attributes (nil if the server sent none). Errors and retries are as
// Open's; SNFS_ERR_FENCED means the server had already forgotten the client's
// opens of the file.
func (s *Session) Close(ctx context.Context, fh nfs3.FH, mode state.Mode, dirty bool) (*nfs3.Fattr, error) {
	var res snfs1.CloseRes
	err := s.retry(ctx, "CLOSE", fh, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		res = snfs1.CloseRes{}
		err := s.rpc.Call(ctx, snfs1.ProcClose, &snfs1.CloseArgs{Client: id, File: fh, Mode: mode, Dirty: dirty}, &res)
		return res.Status, err
	})
	if err != nil {
		return nil, err
	}
	return res.Attr, nil
}

// retry runs call with the current client id until it answers a status other
// than JUKEBOX (waiting between tries) and, after one STALE_CLIENTID, has been
// retried with the id of a new REGISTER. Each try is a new request (a fresh
// xid): the server's reply cache keeps no JUKEBOX answer.
func (s *Session) retry(ctx context.Context, proc string, fh nfs3.FH, name string,
	call func(snfs1.ClientID) (snfs1.Status, error)) error {
	wait := jukeboxFirst
	reregistered := false
	var busy error // the last JUKEBOX answer, if the call is being retried after one
	for {
		id := s.ClientID()
		st, err := call(id)
		if err != nil && busy != nil {
			// The context may end while a retry is in flight: the error
			// still says the server was busy.
			return fmt.Errorf("%w, retried until: %w", busy, err)
		}
		if err != nil {
			return fmt.Errorf("snfs %s %s: %w", proc, shortFH(fh), err)
		}
		serr := &StatusError{Proc: proc, File: fh, Name: name, Status: st}
		switch {
		case st == nfs3.OK:
			return nil
		case st == nfs3.ErrJukebox:
			busy = serr
			s.log.Debug("snfs server busy; retrying", "proc", proc, "fh", shortFH(fh), "after", wait)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%w, retried until: %w", serr, ctx.Err())
			}
			wait = min(2*wait, jukeboxMax)
		case st == snfs1.ErrStaleClientID && !reregistered:
			reregistered = true
			s.log.Info("snfs client id stale; registering again", "proc", proc, "clientid", id)
			if err := s.reregister(ctx, id); err != nil {
				return fmt.Errorf("%w: registering again: %w", serr, err)
			}
		default:
			return serr
		}
	}
}

// CreateOpenAs is SNFS CREATE_OPEN (docs/protocol.md, "CREATE_OPEN") with
// the credential of the application whose create it is (as OpenAs): NFSv3
// CREATE of args and OPEN_WRITE of the file made, in one round trip. The
// result is returned whenever the server answered: a failed create (a
// *StatusError, the result's DirWcc valid) as well as a made file whose open
// failed (err nil, res.Open.Status not OK: the caller OPENs it itself).
// JUKEBOX (the grace period: nothing was made) and STALE_CLIENTID are
// retried as Open's. A server without CREATE_OPEN answers PROC_UNAVAIL (a
// *sunrpc.RPCError).
//
// A call whose ctx ends after it was sent (as an Open's) may have made the
// file and had its open counted, which the caller cannot know: the server
// keeps that open until a callback about the file is answered CB_STALE or
// the client UNREGISTERs. The snfs mount's creates are not abandoned
// (mount/fusefs ctx.go); a caller that gives up on one should UNREGISTER.
func (s *Session) CreateOpenAs(ctx context.Context, uid, gid uint32, groups []uint32, args *nfs3.CreateArgs) (*snfs1.CreateOpenRes, error) {
	rpc := s.rpc.WithAuth(sunrpc.EncodeAuthSys(sunrpc.AuthSysParams{MachineName: "snfs-client", UID: uid, GID: gid, GIDs: groups}))
	var res snfs1.CreateOpenRes
	answered := false
	err := s.retry(ctx, "CREATE_OPEN", args.Where.Dir, args.Where.Name, func(id snfs1.ClientID) (snfs1.Status, error) {
		res = snfs1.CreateOpenRes{}
		if err := s.handBacks.wait(ctx); err != nil {
			return 0, err
		}
		err := rpc.Call(ctx, snfs1.ProcCreateOpen, &snfs1.CreateOpenArgs{Client: id, Create: *args}, &res)
		answered = err == nil
		return res.Status, err
	})
	if !answered {
		return nil, err
	}
	return &res, err
}
