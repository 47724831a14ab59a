package server

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"snfs/gather"
	"snfs/nfs3"
	"snfs/sunrpc"
)

// gatherStats are an export's flush counters (also exported as metrics).
type gatherStats struct {
	fsyncs   atomic.Int64 // every fsync/fdatasync the server issued for the export
	batches  atomic.Int64 // gathered flushes of stable writes and COMMITs
	requests atomic.Int64 // requests those flushes covered
	waitNs   atomic.Int64 // time leaders spent waiting to gather more
}

// GatherStats is a snapshot of an export's flush counters.
type GatherStats struct {
	Fsyncs   int64
	Batches  int64
	Requests int64
	Wait     time.Duration
}

// GatherStats returns the flush counters of the export at path.
func (s *Server) GatherStats(path string) GatherStats {
	e := s.table().byPath[path]
	if e == nil {
		return GatherStats{}
	}
	return GatherStats{Fsyncs: e.stats.fsyncs.Load(), Batches: e.stats.batches.Load(),
		Requests: e.stats.requests.Load(), Wait: time.Duration(e.stats.waitNs.Load())}
}

func (s *Server) observeGather(e *export, st gather.Stats) {
	e.stats.batches.Add(1)
	e.stats.requests.Add(int64(st.Batch))
	e.stats.waitNs.Add(int64(st.Wait))
	if e.metrics != nil {
		e.metrics.GatherBatch.Observe(float64(st.Batch))
		e.metrics.GatherWait.Add(st.Wait.Seconds())
	}
}

// sync flushes r's file (or directory) and counts it.
func (s *Server) sync(r *req, dataOnly bool) error {
	r.exp.stats.fsyncs.Add(1)
	if r.exp.metrics != nil {
		r.exp.metrics.Fsync.Inc()
	}
	return s.syncFn(r.node, dataOnly)
}

// flushFunc is the gathered flush for r's file: one fsync (fdatasync when every
// member allows it), then the attributes every member replies with. A failed flush
// changes the write verifier.
func (s *Server) flushFunc(r *req) gather.FlushFunc {
	return func(dataOnly bool) (any, error) {
		if err := s.sync(r, dataOnly); err != nil {
			s.flushFailed(err)
			return nil, err
		}
		return r.attr(), nil
	}
}

// waitFlush waits for the gathered flush covering ticket, or answers JUKEBOX when
// the flush is stalled for longer than the server's bound.
func (s *Server) waitFlush(c *sunrpc.Call, r *req, t *gather.Ticket, dataOnly bool) (*nfs3.Fattr, error) {
	res, err := t.WaitTimeout(dataOnly, s.flushFunc(r), s.jukebox)
	if errors.Is(err, gather.ErrTimeout) {
		c.NoCache = true
		return nil, fmt.Errorf("%w: %w", errJukebox, err)
	}
	if err != nil {
		return nil, err
	}
	return postAttr(res), nil
}

// postAttr is a gathered flush's result as post-operation attributes.
func postAttr(res any) *nfs3.Fattr {
	a, _ := res.(*nfs3.Fattr)
	return a
}
