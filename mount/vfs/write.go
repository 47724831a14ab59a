package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"snfs/client"
	"snfs/nfs3"
)

// wstate is a file's data that the server has not committed.
type wstate struct {
	dirty    extents   // written by the application, not yet sent
	inflight extents   // being sent by a flush
	unstable []sentRun // sent UNSTABLE, kept until a COMMIT with their verifier
	cred     Cred      // the last writer's identity: write-back is done as it
	mtime    time.Time // when the application last wrote
	// gen is bumped whenever bytes leave the overlay (sent FILE_SYNC,
	// committed, dropped by an error or a truncation): a READ answered
	// before their WRITE reached the server lacks them (readOverlaid).
	gen uint64
}

// sentRun is a run the server acknowledged as UNSTABLE with verifier verf.
type sentRun struct {
	extent
	verf [nfs3.WriteVerfSize]byte
}

func (w *wstate) pending() bool {
	return len(w.dirty) > 0 || len(w.inflight) > 0 || len(w.unstable) > 0
}

// end is the end of the furthest byte not committed.
func (w *wstate) end() uint64 {
	e := max(w.dirty.end(), w.inflight.end())
	for _, s := range w.unstable {
		e = max(e, s.end())
	}
	return e
}

// overlay puts the bytes the server may not have yet into buf (at off): the
// unstable ones, then those being sent, then the newest.
func (w *wstate) overlay(off uint64, buf []byte) {
	for _, s := range w.unstable {
		extents{s.extent}.overlay(off, buf)
	}
	w.inflight.overlay(off, buf)
	w.dirty.overlay(off, buf)
}

func (w *wstate) truncate(size uint64) {
	w.gen++
	w.dirty.truncate(size)
	k := 0
	for _, s := range w.unstable {
		if s.off >= size {
			continue
		}
		if s.end() > size {
			s.data = s.data[:size-s.off]
		}
		w.unstable[k] = s
		k++
	}
	w.unstable = w.unstable[:k]
}

// requeueUnstable puts every uncommitted run back among the dirty ones, under
// anything written since (a verifier changed: the server may have lost them).
func (w *wstate) requeueUnstable() {
	var x extents
	for _, s := range w.unstable {
		x.write(s.off, s.data)
	}
	for _, d := range w.dirty {
		x.write(d.off, d.data)
	}
	w.dirty, w.unstable = x, nil
}

// maxInFlight bounds the WRITEs one flush keeps in flight.
const maxInFlight = 8

// maxRewrites bounds how often one flush writes everything again after a
// verifier change before it gives up with EIO.
const maxRewrites = 5

// ErrVerifierChanged: the server's write verifier kept changing while the
// client rewrote its uncommitted data.
var ErrVerifierChanged = errors.New("vfs: write verifier kept changing")

// flush sends the dirty data with UNSTABLE WRITEs and, if commit, COMMITs it,
// rewriting everything uncommitted when the COMMIT's verifier differs from a
// WRITE's (RFC 1813 section 3.3.7). Data is dropped from memory only once
// committed (or written FILE_SYNC). A WRITE that fails with an NFS error
// (ENOSPC, EDQUOT, ...) drops the data it carried, as a kernel client does,
// and the error is returned; a transport error or cancellation keeps it.
func (i *Inode) flush(ctx context.Context, commit bool) error {
	i.flushMu.Lock()
	defer i.flushMu.Unlock()
	// snfs mode: the cache directory's dirty data is older than this.
	if err := i.fs.ops.beforeThrough(ctx, i); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		i.mu.Lock()
		batch := i.w.dirty
		i.w.dirty, i.w.inflight = nil, batch
		cred := i.w.cred
		i.mu.Unlock()

		sent, err := i.send(ctx, cred, batch)
		i.mu.Lock()
		i.w.inflight, i.w.gen = nil, i.w.gen+1
		if err != nil {
			var st nfs3.Status
			if !errors.As(err, &st) { // keep it for the next flush
				var x extents
				for _, e := range batch {
					x.write(e.off, e.data)
				}
				for _, d := range i.w.dirty {
					x.write(d.off, d.data)
				}
				i.w.dirty = x
			}
			i.mu.Unlock()
			return err
		}
		i.w.unstable = append(i.w.unstable, sent...)
		need := commit && len(i.w.unstable) > 0
		i.mu.Unlock()
		if !need {
			return nil
		}

		var res *nfs3.CommitRes
		i.fs.stats.Commits.Add(1)
		res, err = rpc(ctx, i.fs, func() (*nfs3.CommitRes, error) { return i.fs.client(cred).Commit(ctx, i.FH, 0, 0) })
		i.mu.Lock()
		if res != nil {
			i.wccLocked(&res.Wcc, time.Now())
		}
		if err != nil {
			var st nfs3.Status
			if errors.As(err, &st) {
				i.w.unstable, i.w.gen = nil, i.w.gen+1
			}
			i.mu.Unlock()
			return fmt.Errorf("COMMIT: %w", err)
		}
		mismatch := false
		for _, s := range i.w.unstable {
			if s.verf != res.Verf {
				mismatch = true
				break
			}
		}
		if !mismatch {
			i.fs.log.Debug("write-through committed", "fileid", i.FileID)
			i.w.unstable, i.w.gen = nil, i.w.gen+1
			if !i.w.pending() {
				i.w.mtime = time.Time{}
			}
			i.mu.Unlock()
			return nil
		}
		i.fs.stats.Rewrites.Add(1)
		i.w.requeueUnstable()
		i.mu.Unlock()
		i.fs.log.Warn("write verifier changed: rewriting uncommitted data", i.fs.pathAttr(i), "fileid", i.FileID)
		if attempt >= maxRewrites {
			return ErrVerifierChanged
		}
	}
}

// send writes batch in wsize pieces, maxInFlight at a time, and returns the
// pieces the server holds UNSTABLE (with their data, to send again if the
// COMMIT's verifier differs).
func (i *Inode) send(ctx context.Context, cred Cred, batch extents) ([]sentRun, error) {
	var pieces []piece
	ws := uint64(i.fs.wsize)
	for _, e := range batch {
		for off := uint64(0); off < uint64(len(e.data)); off += ws {
			pieces = append(pieces, piece{off: e.off + off, data: e.data[off:min(off+ws, uint64(len(e.data)))]})
		}
	}
	sent, _, err := i.sendPieces(ctx, i.fs.client(cred), pieces, nil, true)
	return sent, err
}

// piece is one WRITE's worth of a file (at most wsize): its data, or, when
// data is nil, n bytes at off to read when its turn comes (a cache file's,
// writeback.go), so that no more than maxInFlight pieces are in memory.
type piece struct {
	off  uint64
	n    int
	data []byte
}

// sendPieces writes the pieces UNSTABLE, maxInFlight at a time, and returns
// the runs the server holds UNSTABLE, the bytes sent and the first error. A
// piece without data is read with readAt first (io.EOF: the file was cut
// since, the rest is gone). keep false drops the runs' data: whoever sends
// them again reads them again.
func (i *Inode) sendPieces(ctx context.Context, c *client.NFS, pieces []piece,
	readAt func([]byte, int64) (int, error), keep bool) ([]sentRun, uint64, error) {
	var (
		mu    sync.Mutex
		runs  []sentRun
		bytes uint64
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, maxInFlight)
	)
	for _, p := range pieces {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			data, err := p.data, error(nil)
			if data == nil {
				buf := make([]byte, p.n)
				var k int
				k, err = readAt(buf, int64(p.off))
				if err == io.EOF {
					err = nil
				}
				data = buf[:k]
			}
			var sent []sentRun
			if err == nil && len(data) > 0 {
				sent, err = i.writeAll(ctx, c, extent{p.off, data}, nfs3.Unstable)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			for _, s := range sent {
				if !keep {
					s.data = nil
				}
				runs = append(runs, s)
			}
			bytes += uint64(len(data))
		}()
	}
	wg.Wait()
	return runs, bytes, first
}

// writeAll writes one piece as how asks, continuing after short writes; it
// returns the runs the server took UNSTABLE.
func (i *Inode) writeAll(ctx context.Context, c interface {
	Write(context.Context, nfs3.FH, uint64, []byte, nfs3.StableHow) (*nfs3.WriteRes, error)
}, p extent, how nfs3.StableHow) ([]sentRun, error) {
	var runs []sentRun
	for len(p.data) > 0 {
		i.fs.stats.Writes.Add(1)
		res, err := rpc(ctx, i.fs, func() (*nfs3.WriteRes, error) { return c.Write(ctx, i.FH, p.off, p.data, how) })
		if res != nil {
			i.mu.Lock()
			i.wccLocked(&res.Wcc, time.Now())
			i.mu.Unlock()
		}
		if err != nil {
			return runs, fmt.Errorf("WRITE at %d: %w", p.off, err)
		}
		n := min(int(res.Count), len(p.data))
		if n == 0 {
			return runs, fmt.Errorf("WRITE at %d: %w", p.off, nfs3.ErrIO)
		}
		if res.Committed == nfs3.Unstable {
			runs = append(runs, sentRun{extent{p.off, p.data[:n]}, res.Verf})
		}
		p = extent{p.off + uint64(n), p.data[n:]}
	}
	return runs, nil
}
