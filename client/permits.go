package client

import (
	"context"
	"errors"
	"fmt"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// GetPermit is SNFS GET_PERMIT (docs/protocol.md section 21.2): a write-back
// permit on the directory dir. granted false: none (another client holds
// it, a bound, a change while it was being granted); the client then makes
// its changes through the server. A permit is recalled by a CB_CALLBACK
// with mode RECALL_PERMIT and dir's handle, delivered to the session's
// CallbackHandler: the handler reintegrates the directory's log, then
// answers. Errors and retries are as Open's.
func (s *Session) GetPermit(ctx context.Context, dir nfs3.FH) (permit uint64, granted bool, err error) {
	var res snfs1.GetPermitRes
	err = s.retry(ctx, "GET_PERMIT", dir, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		res = snfs1.GetPermitRes{}
		err := s.rpc.Call(ctx, snfs1.ProcGetPermit, &snfs1.GetPermitArgs{Client: id, Dir: dir}, &res)
		return res.Status, err
	})
	if err != nil {
		return 0, false, err
	}
	return res.Permit, res.Granted, nil
}

// PermitRelease is SNFS PERMIT_RELEASE (docs/protocol.md section 21.5): the
// client gives back permits (at most snfs1.PermitReleaseMax). Errors and
// retries are as Open's.
func (s *Session) PermitRelease(ctx context.Context, permits []snfs1.PermitRef) error {
	if len(permits) > snfs1.PermitReleaseMax {
		return fmt.Errorf("snfs PERMIT_RELEASE: %d permits, at most %d", len(permits), snfs1.PermitReleaseMax)
	}
	var fh nfs3.FH
	if len(permits) > 0 {
		fh = permits[0].Dir
	}
	return s.retry(ctx, "PERMIT_RELEASE", fh, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		var res snfs1.PermitReleaseRes
		err := s.rpc.Call(ctx, snfs1.ProcPermitRelease, &snfs1.PermitReleaseArgs{Client: id, Permits: permits}, &res)
		return res.Status, err
	})
}

// Reintegrate is SNFS REINTEGRATE (docs/protocol.md section 21.3): the log
// records (at most snfs1.ReintegrateMax, in increasing LSN order), applied
// by the server in order under permits. The reply lists one result per
// record up to the first that failed (res.Failed); a record whose LSN the
// server had applied before is not applied again. A call that fails as a
// whole returns an error; the records are then to be sent again, as they
// are. Errors and retries are as Open's.
func (s *Session) Reintegrate(ctx context.Context, permits []snfs1.PermitRef, records []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	if len(records) > snfs1.ReintegrateMax || len(permits) > snfs1.PermitReleaseMax {
		return nil, fmt.Errorf("snfs REINTEGRATE: %d records and %d permits, at most %d and %d",
			len(records), len(permits), snfs1.ReintegrateMax, snfs1.PermitReleaseMax)
	}
	var fh nfs3.FH
	if len(permits) > 0 {
		fh = permits[0].Dir
	}
	var res snfs1.ReintegrateRes
	err := s.retry(ctx, "REINTEGRATE", fh, "", func(id snfs1.ClientID) (snfs1.Status, error) {
		res = snfs1.ReintegrateRes{}
		err := s.rpc.Call(ctx, snfs1.ProcReintegrate, &snfs1.ReintegrateArgs{Client: id, Permits: permits, Records: records}, &res)
		return res.Status, err
	})
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// reclaimPermits is SNFS RECLAIM_PERMIT (docs/protocol.md section 21.9),
// sent through call during a reclaim (SessionConfig.ReclaimPermits): the
// permits of dirs, at most snfs1.ReclaimPermitMax, granted again after a
// server restart; one id per directory, 0 for those not granted. A server
// without the procedure (PROC_UNAVAIL) grants none.
func reclaimPermits(ctx context.Context, id snfs1.ClientID, dirs []nfs3.FH,
	call func(ctx context.Context, proc uint32, args xdr.Encoder, res xdr.Decoder) error) ([]uint64, error) {
	if len(dirs) > snfs1.ReclaimPermitMax {
		return nil, fmt.Errorf("snfs RECLAIM_PERMIT: %d directories, at most %d", len(dirs), snfs1.ReclaimPermitMax)
	}
	var res snfs1.ReclaimPermitRes
	err := call(ctx, snfs1.ProcReclaimPermit, &snfs1.ReclaimPermitArgs{Client: id, Dirs: dirs}, &res)
	var re *sunrpc.RPCError
	switch {
	case errors.As(err, &re) && re.Accept == sunrpc.ProcUnavail:
		return make([]uint64, len(dirs)), nil
	case err != nil:
		return nil, fmt.Errorf("snfs RECLAIM_PERMIT: %w", err)
	case res.Status == snfs1.ErrNoGrace:
		return make([]uint64, len(dirs)), nil
	case res.Status != nfs3.OK:
		return nil, &StatusError{Proc: "RECLAIM_PERMIT", Status: res.Status}
	case len(res.Permits) != len(dirs):
		return nil, fmt.Errorf("snfs RECLAIM_PERMIT: %d ids for %d directories", len(res.Permits), len(dirs))
	}
	return res.Permits, nil
}
