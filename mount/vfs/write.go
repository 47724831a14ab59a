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
	Dirty    extents   // written by the application, not yet sent
	inflight extents   // being sent by a flush
	Unstable []SentRun // sent UNSTABLE, kept until a COMMIT with their verifier
	Cred     Cred      // the last writer's identity: write-back is done as it
	Mtime    time.Time // when the application last wrote
	// gen is bumped whenever bytes leave the overlay (sent FILE_SYNC,
	// committed, dropped by an error or a truncation): a READ answered
	// before their WRITE reached the server lacks them (readOverlaid).
	gen uint64
}

// sentRun is a run the server acknowledged as UNSTABLE with verifier verf.
type SentRun struct {
	Extent
	Verf [nfs3.WriteVerfSize]byte
}

func (w *wstate) Pending() bool {
	return len(w.Dirty) > 0 || len(w.inflight) > 0 || len(w.Unstable) > 0
}

// end is the end of the furthest byte not committed.
func (w *wstate) end() uint64 {
	e := max(w.Dirty.end(), w.inflight.end())
	for _, s := range w.Unstable {
		e = max(e, s.end())
	}
	return e
}

// overlay puts the bytes the server may not have yet into buf (at off): the
// unstable ones, then those being sent, then the newest.
func (w *wstate) overlay(off uint64, buf []byte) {
	for _, s := range w.Unstable {
		extents{s.Extent}.overlay(off, buf)
	}
	w.inflight.overlay(off, buf)
	w.Dirty.overlay(off, buf)
}

func (w *wstate) truncate(size uint64) {
	w.gen++
	w.Dirty.truncate(size)
	k := 0
	for _, s := range w.Unstable {
		if s.Off >= size {
			continue
		}
		if s.end() > size {
			s.Data = s.Data[:size-s.Off]
		}
		w.Unstable[k] = s
		k++
	}
	w.Unstable = w.Unstable[:k]
}

// requeueUnstable puts every uncommitted run back among the dirty ones, under
// anything written since (a verifier changed: the server may have lost them).
func (w *wstate) requeueUnstable() {
	var x extents
	for _, s := range w.Unstable {
		x.Write(s.Off, s.Data)
	}
	for _, d := range w.Dirty {
		x.Write(d.Off, d.Data)
	}
	w.Dirty, w.Unstable = x, nil
}

// maxInFlight bounds the WRITEs one flush keeps in flight.
const maxInFlight = 8

// maxRewrites bounds how often one flush writes everything again after a
// verifier change before it gives up with EIO.
const MaxRewrites = 5

// ErrVerifierChanged: the server's write verifier kept changing while the
// client rewrote its uncommitted data.
var ErrVerifierChanged = errors.New("vfs: write verifier kept changing")

// Flush sends the dirty data with UNSTABLE WRITEs and, if commit, COMMITs it,
// rewriting everything uncommitted when the COMMIT's verifier differs from a
// WRITE's (RFC 1813 section 3.3.7). Data is dropped from memory only once
// committed (or written FILE_SYNC). A WRITE or COMMIT that fails with an
// NFS error (ENOSPC, EDQUOT, ...) drops the data, as a kernel client does:
// the error is returned and latched on the inode for every open's next close
// and fsync (wberr.go); a transport error or cancellation keeps the data.
func (i *Inode) Flush(ctx context.Context, commit bool) error {
	i.FlushMu.Lock()
	defer i.FlushMu.Unlock()
	// snfs mode: the cache directory's dirty data is older than this.
	if err := i.fs.ops.BeforeThrough(ctx, i); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		i.Mu.Lock()
		batch := i.WState.Dirty
		i.WState.Dirty, i.WState.inflight = nil, batch
		cred := i.WState.Cred
		i.Mu.Unlock()

		sent, err := i.send(ctx, cred, batch)
		i.Mu.Lock()
		i.WState.inflight, i.WState.gen = nil, i.WState.gen+1
		if err != nil {
			var st nfs3.Status
			if errors.As(err, &st) {
				// Dropped: every open's next close and fsync is told
				// (wberr.go), not only this flush's caller.
				i.LatchWbErrLocked(err)
			} else { // keep it for the next flush
				var x extents
				for _, e := range batch {
					x.Write(e.Off, e.Data)
				}
				for _, d := range i.WState.Dirty {
					x.Write(d.Off, d.Data)
				}
				i.WState.Dirty = x
			}
			i.Mu.Unlock()
			return err
		}
		i.WState.Unstable = append(i.WState.Unstable, sent...)
		need := commit && len(i.WState.Unstable) > 0
		i.Mu.Unlock()
		if !need {
			return nil
		}

		var res *nfs3.CommitRes
		i.fs.stats.Commits.Add(1)
		res, err = RPC(ctx, i.fs, func() (*nfs3.CommitRes, error) { return i.fs.Client(cred).Commit(ctx, i.FH, 0, 0) })
		i.Mu.Lock()
		if res != nil {
			i.WccLocked(&res.Wcc, i.fs.Now())
		}
		if err != nil {
			err = fmt.Errorf("COMMIT: %w", err)
			var st nfs3.Status
			if errors.As(err, &st) {
				i.WState.Unstable, i.WState.gen = nil, i.WState.gen+1
				i.LatchWbErrLocked(err) // dropped (wberr.go)
			}
			i.Mu.Unlock()
			return err
		}
		mismatch := false
		for _, s := range i.WState.Unstable {
			if s.Verf != res.Verf {
				mismatch = true
				break
			}
		}
		if !mismatch {
			i.fs.log.Debug("write-through committed", "fileid", i.FileID)
			i.WState.Unstable, i.WState.gen = nil, i.WState.gen+1
			if !i.WState.Pending() {
				i.WState.Mtime = time.Time{}
			}
			i.Mu.Unlock()
			return nil
		}
		i.fs.stats.Rewrites.Add(1)
		i.WState.requeueUnstable()
		i.Mu.Unlock()
		i.fs.log.Warn("write verifier changed: rewriting uncommitted data", i.fs.PathAttr(i), "fileid", i.FileID)
		if attempt >= MaxRewrites {
			return ErrVerifierChanged
		}
	}
}

// send writes batch in wsize pieces, maxInFlight at a time, and returns the
// pieces the server holds UNSTABLE (with their data, to send again if the
// COMMIT's verifier differs).
func (i *Inode) send(ctx context.Context, cred Cred, batch extents) ([]SentRun, error) {
	var pieces []Piece
	ws := uint64(i.fs.wsize)
	for _, e := range batch {
		for off := uint64(0); off < uint64(len(e.Data)); off += ws {
			pieces = append(pieces, Piece{Off: e.Off + off, data: e.Data[off:min(off+ws, uint64(len(e.Data)))]})
		}
	}
	sent, _, err := i.SendPieces(ctx, i.fs.Client(cred), pieces, nil, true)
	return sent, err
}

// piece is one WRITE's worth of a file (at most wsize): its data, or, when
// data is nil, n bytes at off to read when its turn comes (a cache file's,
// writeback.go), so that no more than maxInFlight pieces are in memory.
type Piece struct {
	Off  uint64
	N    int
	data []byte
}

// SendPieces writes the pieces UNSTABLE, maxInFlight at a time, and returns
// the runs the server holds UNSTABLE, the bytes sent and the first error. A
// piece without data is read with readAt first (io.EOF: the file was cut
// since, the rest is gone). keep false drops the runs' data: whoever sends
// them again reads them again.
func (i *Inode) SendPieces(ctx context.Context, c *client.NFS, pieces []Piece,
	readAt func([]byte, int64) (int, error), keep bool) ([]SentRun, uint64, error) {
	var (
		mu    sync.Mutex
		runs  []SentRun
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
				buf := make([]byte, p.N)
				var k int
				k, err = readAt(buf, int64(p.Off))
				if err == io.EOF {
					err = nil
				}
				data = buf[:k]
			}
			var sent []SentRun
			if err == nil && len(data) > 0 {
				sent, err = i.WriteAll(ctx, c, Extent{p.Off, data}, nfs3.Unstable)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			for _, s := range sent {
				if !keep {
					s.Data = nil
				}
				runs = append(runs, s)
			}
			bytes += uint64(len(data))
		}()
	}
	wg.Wait()
	return runs, bytes, first
}

// WriteAll writes one piece as how asks, continuing after short writes; it
// returns the runs the server took UNSTABLE.
func (i *Inode) WriteAll(ctx context.Context, c interface {
	Write(context.Context, nfs3.FH, uint64, []byte, nfs3.StableHow) (*nfs3.WriteRes, error)
}, p Extent, how nfs3.StableHow) ([]SentRun, error) {
	var runs []SentRun
	for len(p.Data) > 0 {
		i.fs.stats.Writes.Add(1)
		res, err := RPC(ctx, i.fs, func() (*nfs3.WriteRes, error) { return c.Write(ctx, i.FH, p.Off, p.Data, how) })
		if res != nil {
			i.Mu.Lock()
			i.WccLocked(&res.Wcc, i.fs.Now())
			i.Mu.Unlock()
		}
		if err != nil {
			return runs, fmt.Errorf("WRITE at %d: %w", p.Off, err)
		}
		n := min(int(res.Count), len(p.Data))
		if n == 0 {
			return runs, fmt.Errorf("WRITE at %d: %w", p.Off, nfs3.ErrIO)
		}
		if res.Committed == nfs3.Unstable {
			runs = append(runs, SentRun{Extent{p.Off, p.Data[:n]}, res.Verf})
		}
		p = Extent{p.Off + uint64(n), p.Data[n:]}
	}
	return runs, nil
}
