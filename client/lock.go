package client

import (
	"context"

	"snfs/snfs1"
)

// GrantHandler answers CB_GRANTED (docs/protocol.md, "CB_GRANTED"): a blocked
// LOCK of this client is granted. GrantedOK if a process still waits for it,
// GrantedUnwanted if none does (the server takes the grant back). A
// CallbackHandler that also implements GrantHandler gets the session's
// CB_GRANTED calls; without one every grant is answered GrantedUnwanted.
type GrantHandler interface {
	Granted(ctx context.Context, a *snfs1.GrantedArgs) snfs1.GrantedStat
}

// Lock is SNFS LOCK (docs/protocol.md, "LOCK"). The answer (granted, denied
// with the holder, blocked, ...) is in the result; an error is the request's
// failure (a status other than OK, after JUKEBOX retries).
func (s *Session) Lock(ctx context.Context, a snfs1.LockArgs) (*snfs1.LockRes, error) {
	var res snfs1.LockRes
	err := s.retry(ctx, "LOCK", a.File, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		res, a.Client = snfs1.LockRes{}, id
		err := s.rpc.Call(ctx, snfs1.ProcLock, &a, &res)
		return res.Status, err
	})
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// LockT is SNFS LOCKT (docs/protocol.md, "LOCKT").
func (s *Session) LockT(ctx context.Context, a snfs1.LockTArgs) (*snfs1.LockRes, error) {
	var res snfs1.LockRes
	err := s.retry(ctx, "LOCKT", a.File, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		res, a.Client = snfs1.LockRes{}, id
		err := s.rpc.Call(ctx, snfs1.ProcLockT, &a, &res)
		return res.Status, err
	})
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// LockU is SNFS LOCKU (docs/protocol.md, "LOCKU"): an unlock, or with
// a.Cancel the withdrawal of a waiting request.
func (s *Session) LockU(ctx context.Context, a snfs1.LockUArgs) error {
	return s.retry(ctx, "LOCKU", a.File, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		var res snfs1.StatusRes
		a.Client = id
		err := s.rpc.Call(ctx, snfs1.ProcLockU, &a, &res)
		return res.Status, err
	})
}
