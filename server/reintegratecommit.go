package server

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"snfs/store"
	"snfs/sunrpc"
)

// A REINTEGRATE batch's group commit (docs/protocol.md section 21.3): the
// records are applied by the NFSv3 procedures' handlers, whose commit
// functions (commitNew, commitMeta, commitObj) would each flush before their
// reply - two fsyncs per CREATE on a sync export. Within a batch they only
// collect what they would flush; the batch flushes it once, before it
// commits its last applied LSN: one syncfs of the export's file system
// (a few items: the objects, made or whose attributes changed, then the
// directories whose entries changed, each fsync'd once, as commitNew
// orders an object before the entry naming it). What a crash
// before that flush keeps of the batch is what the file system kept of
// its changes, made in order: the check after the crash (the pre-image)
// finds the prefix.

// commitSet is what a batch's records left to flush.
type commitSet struct {
	mu   sync.Mutex
	objs []commitItem // guarded by mu
	dirs []commitItem // guarded by mu
	seen map[string]bool
}

type commitItem struct {
	fh  []byte
	exp *export
}

// add records node (a directory whose entries changed when dir, else an
// object) to be flushed.
func (cs *commitSet) add(r *req, dir bool) {
	key := string(r.node.Handle)
	if dir {
		key = "d" + key
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.seen == nil {
		cs.seen = map[string]bool{}
	}
	if cs.seen[key] {
		return
	}
	cs.seen[key] = true
	it := commitItem{fh: append([]byte(nil), r.node.Handle...), exp: r.exp}
	if dir {
		cs.dirs = append(cs.dirs, it)
	} else {
		cs.objs = append(cs.objs, it)
	}
}

// commitsOf returns the commit set of the REINTEGRATE call c, nil when c is
// not one being applied with a group commit.
func (s *Server) commitsOf(c *sunrpc.Call) *commitSet {
	if s.grouping.Load() == 0 {
		return nil
	}
	if v, ok := s.grouped.Load(c); ok {
		return v.(*commitSet)
	}
	return nil
}

// groupCommit starts collecting the flushes of the batch call c (none with
// Config.ReintegrateFlushEach); the returned flush ends it, flushing what
// was collected.
func (s *Server) groupCommit(c *sunrpc.Call) (flush func() error) {
	if s.flushEach {
		return func() error { return nil }
	}
	cs := &commitSet{}
	s.grouped.Store(c, cs)
	s.grouping.Add(1)
	return func() error {
		s.grouped.Delete(c)
		s.grouping.Add(-1)
		return s.flushSet(cs)
	}
}

// groupSyncFS is the number of objects and directories past which a batch
// is flushed by one syncfs of the export's file system rather than one
// fsync each: on a journaled file system each fsync commits the journal
// (and flushes the device) again, whether or not an earlier one of the
// batch already wrote what it covers.
const groupSyncFS = 2

// flushSet flushes what cs collected: up to groupSyncFS items one by one,
// the objects, then the directories (an object gone since, made and
// removed by the batch, has nothing to flush); past it, one syncfs per
// export.
func (s *Server) flushSet(cs *commitSet) error {
	cs.mu.Lock()
	items := append(append([]commitItem(nil), cs.objs...), cs.dirs...)
	cs.mu.Unlock()
	if len(items) > groupSyncFS {
		done := map[*export]bool{}
		for _, it := range items {
			if done[it.exp] {
				continue
			}
			done[it.exp] = true
			it.exp.stats.fsyncs.Add(1)
			if err := s.store.SyncExport(it.exp.st); err != nil {
				return fmt.Errorf("reintegration: group commit: %w", err)
			}
		}
		return nil
	}
	for _, it := range items {
		n, err := s.store.Resolve(it.fh)
		if errors.Is(err, store.ErrStale) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reintegration: group commit: %w", err)
		}
		err = s.flushNode(&req{node: n, exp: it.exp})
		n.Release()
		if err != nil {
			return fmt.Errorf("reintegration: group commit: %w", err)
		}
	}
	return nil
}

// flushNode is commitObj's flush without its deferral.
func (s *Server) flushNode(r *req) error {
	switch r.node.Stat.Mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFDIR:
		if err := s.store.OpenIO(r.node); err != nil {
			return err
		}
		return s.sync(r, false)
	}
	r.exp.stats.fsyncs.Add(1)
	return s.store.SyncFS(r.node)
}
