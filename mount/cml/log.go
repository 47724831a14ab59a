package cml

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/snfs1"
)

// DirName is the log's directory in the mount's cache directory.
const DirName = "cml"

const (
	segSuffix = ".cml"
	tmpSuffix = ".tmp"
	// defaultSegBytes is a segment's preallocation; a frame that does not fit
	// in what is left goes to a new segment.
	defaultSegBytes = 1 << 20
)

// Options are Open's.
type Options struct {
	// Now is the clock of the records' times (Age); nil: time.Now.
	Now func() time.Time
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// SegmentBytes is a segment's preallocated size; 0: 1 MiB.
	SegmentBytes int64
}

// Log is the client modification log of one mount: records appended in LSN
// order, durable in the cache directory, optimised and reintegrated in
// batches. Its methods may be called from any goroutine.
type Log struct {
	dir      string
	now      func() time.Time
	log      *slog.Logger
	segBytes int64

	// reint makes reintegrations one at a time; it is held across their
	// RPCs and taken before mu.
	reint sync.Mutex

	mu     sync.Mutex
	cond   *sync.Cond // on mu: a flush ended
	err    error      // sticky: a write or flush failed, or the log is closed
	f      *os.File   // the segment written
	segNum uint64     // its number
	off    int64      // where the next frame goes in f
	size   int64      // f's preallocated size
	segs   []uint64   // live segment numbers, oldest first (segNum last)
	// written and synced count bytes across segments: frames up to synced
	// are flushed. syncing: a caller is flushing f (without mu); f is not
	// closed or switched meanwhile.
	written, synced int64
	syncing         bool
	retired         []*os.File // segments switched from during a flush: closed when it ends

	next    uint64             // the next LSN
	pending []entry            // raw records not covered by the plan, LSN order
	plan    []snfs1.CMLRecord  // the sealed, optimised records not yet acknowledged or skipped
	planAt  time.Time          // the oldest raw record the plan covers
	planHi  uint64             // the highest raw LSN the plan covers
	handles map[uint64]nfs3.FH // provisional id -> real handle, from replies
	// maySent: the highest plan LSN a batch whose reply was not recorded
	// may have carried (a batch sent before a crash, or whose call failed):
	// the server may have applied up to it, so a reply whose last applied
	// LSN is above the batch sent is not an LSN reused up to there.
	maySent uint64
	bytes   int64 // encoded size of pending and plan records
	// bases: by baseKey, what the names the records left change held on
	// the server before the first of them (base.go).
	bases map[string]Base
}

// entry is a raw record and when it was appended.
type entry struct {
	rec snfs1.CMLRecord
	at  time.Time
}

// Open opens the log in dir (made if missing; normally
// CACHEDIR/cml), replaying it: a torn or damaged tail (a crash while
// appending) is cut, a plan whose last chunk is missing (a crash while it
// was written: none of it was sent) is dropped. Writes go to a new segment,
// never after a possibly torn tail.
func Open(dir string, o Options) (*Log, error) {
	l := &Log{dir: dir, now: o.Now, log: o.Logger, segBytes: o.SegmentBytes, handles: map[uint64]nfs3.FH{}}
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.segBytes <= 0 {
		l.segBytes = defaultSegBytes
	}
	l.cond = sync.NewCond(&l.mu)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, fmt.Errorf("cml: %w", err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("cml: %w", err)
	}
	nums, err := l.segNums()
	if err != nil {
		return nil, err
	}
	start := -1 // the newest segment that begins with a checkpoint
	for i := len(nums) - 1; i >= 0 && start < 0; i-- {
		b, err := readHead(l.segPath(nums[i]))
		if err != nil {
			return nil, err
		}
		if f, _, ok := decodeFrame(b, 0); ok && f.kind == kindCheckpoint {
			start = i
		}
	}
	if start < 0 {
		if len(nums) > 0 {
			// The first segment is written whole, checkpoint first, under a
			// temporary name: segments without one are damage, not a crash.
			return nil, fmt.Errorf("cml: %s: %d segments and none begins with a checkpoint", dir, len(nums))
		}
		// A new log. The first LSN is
		// the clock's microseconds: the server keeps the last applied LSN of
		// the client's name, and a log made again (a cache directory wiped)
		// must not start below it, where its records would be answered
		// without being applied.
		first := max(uint64(l.now().UnixMicro()), 1)
		if err := l.startSegment(&frame{kind: kindCheckpoint, next: first}, nil); err != nil {
			return nil, err
		}
		l.next = first
		return l, nil
	}
	for _, n := range nums[:start] {
		os.Remove(l.segPath(n))
	}
	var building *frame // a plan whose last chunk is not read yet
	var lastOp uint64
	for _, n := range nums[start:] {
		path := l.segPath(n)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("cml: %w", err)
		}
		// A plan is written with one write, into one segment: one not ended
		// in the segment before was cut short by a crash.
		if building != nil {
			l.log.Warn("cml: dropping a plan whose writing a crash cut short (none of it was sent)", "hi", building.hi)
			building = nil
		}
		off := 0
		for {
			f, next, ok := decodeFrame(b, off)
			if ok {
				ok = l.replay(&f, &building, &lastOp, off == 0)
			}
			if !ok {
				break
			}
			off = next
		}
		if tail := b[off:]; slices.ContainsFunc(tail, func(c byte) bool { return c != 0 }) {
			// What follows the last good frame is a frame cut short by a
			// crash (never flushed, so never acknowledged) or damaged.
			l.log.Warn("cml: cutting a torn or damaged tail", "segment", path, "offset", off, "bytes", len(tail))
			if err := cutFile(path, int64(off)); err != nil {
				return nil, err
			}
		}
		l.segs = append(l.segs, n)
	}
	if building != nil {
		l.log.Warn("cml: dropping a plan whose writing a crash cut short (none of it was sent)", "hi", building.hi)
	}
	l.next = max(l.next, lastOp+1)
	if len(l.plan) > 0 {
		l.maySent = l.plan[len(l.plan)-1].LSN
	}
	l.segNum = l.segs[len(l.segs)-1]
	if err := l.newSegment(0); err != nil {
		return nil, err
	}
	return l, nil
}

// replay applies frame f to the state; false: f is inconsistent with what
// came before it (damage a CRC did not catch): the segment ends there.
func (l *Log) replay(f *frame, building **frame, lastOp *uint64, first bool) bool {
	switch f.kind {
	case kindCheckpoint:
		if !first {
			return false
		}
		l.next, l.pending, l.plan, l.planHi, l.bytes = f.next, nil, nil, 0, 0
		l.handles, l.bases = map[uint64]nfs3.FH{}, nil
		*building, *lastOp = nil, 0
	case kindOp, kindOpBased:
		if f.rec.LSN <= *lastOp || f.rec.LSN <= l.planHi {
			return false
		}
		*lastOp = f.rec.LSN
		l.pending = append(l.pending, entry{rec: f.rec, at: unixNano(f.at)})
		l.bytes += int64(recordSize(&f.rec))
		l.addBasesLocked(f.bases)
	case kindBase:
		l.addBasesLocked(f.bases)
	case kindPlan:
		if len(l.plan) > 0 {
			return false
		}
		if *building == nil {
			*building = &frame{kind: kindPlan, hi: f.hi, at: f.at}
		} else if (*building).hi != f.hi {
			return false
		}
		b := *building
		if len(b.recs) > 0 && len(f.recs) > 0 && f.recs[0].LSN <= b.recs[len(b.recs)-1].LSN {
			return false
		}
		b.recs = append(b.recs, f.recs...)
		if f.last {
			l.installPlan(b.recs, b.hi, unixNano(b.at))
			*building = nil
		}
	case kindAck:
		for _, h := range f.handles {
			l.handles[h.prov] = h.fh
		}
		l.ackPlan(f.applied)
	case kindSkip:
		if len(l.plan) == 0 || l.plan[0].LSN != f.lsn {
			return false
		}
		l.bytes -= int64(recordSize(&l.plan[0]))
		l.plan = l.plan[1:]
		l.pruneBasesLocked() // as Skip
	}
	return true
}

// installPlan makes recs the plan, covering the raw records up to hi.
func (l *Log) installPlan(recs []snfs1.CMLRecord, hi uint64, at time.Time) {
	n := 0
	for n < len(l.pending) && l.pending[n].rec.LSN <= hi {
		l.bytes -= int64(recordSize(&l.pending[n].rec))
		n++
	}
	l.pending = l.pending[n:]
	l.plan, l.planHi, l.planAt = recs, hi, at
	for i := range recs {
		l.bytes += int64(recordSize(&recs[i]))
	}
}

// ackPlan drops the plan's records at or below applied, and moves the
// bases of their names to what they left (base.go).
func (l *Log) ackPlan(applied uint64) {
	n := 0
	for n < len(l.plan) && l.plan[n].LSN <= applied {
		l.bytes -= int64(recordSize(&l.plan[n]))
		n++
	}
	acked := l.plan[:n]
	l.plan = l.plan[n:]
	if len(l.bases) > 0 || n > 0 && len(l.plan)+len(l.pending) > 0 {
		l.moveBasesLocked(acked)
	}
}

func (l *Log) segPath(n uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%016d%s", n, segSuffix))
}

// segNums returns the numbers of the segment files, in order.
func (l *Log) segNums() ([]uint64, error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("cml: %w", err)
	}
	var nums []uint64
	for _, de := range ents {
		name := de.Name()
		if strings.HasSuffix(name, tmpSuffix) {
			os.Remove(filepath.Join(l.dir, name)) // a compaction a crash cut short
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err == nil && strings.HasSuffix(name, segSuffix) {
			nums = append(nums, n)
		}
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	return nums, nil
}

// readHead reads enough of a segment for its first frame.
func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cml: %w", err)
	}
	defer f.Close()
	b := make([]byte, 64<<10)
	n, err := f.ReadAt(b, 0)
	if err != nil && n < len(b) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("cml: %w", err)
	}
	return b[:n], nil
}

// cutFile truncates a segment at off, durably.
func cutFile(path string, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("cml: cut %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("cml: cut %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cml: cut %s: %w", path, err)
	}
	return nil
}

// newSegment makes the next segment, of at least n bytes, filled with zeros
// and flushed with its name before anything is written to it, and switches
// to it. The caller holds mu (or owns l alone) and no flush is running.
func (l *Log) newSegment(n int64) error {
	size := max(n, l.segBytes)
	num := l.segNum + 1
	path := l.segPath(num)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("cml: %w", err)
	}
	if _, err = f.Write(make([]byte, size)); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(l.dir)
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("cml: new segment: %w", err)
	}
	if l.f != nil {
		if l.syncing {
			l.retired = append(l.retired, l.f) // the flush running uses it
		} else {
			l.f.Close()
		}
	}
	l.f, l.segNum, l.off, l.size = f, num, 0, size
	l.segs = append(l.segs, num)
	return nil
}

// startSegment writes a segment that begins with the checkpoint cp and the
// frames rest (the live state), whole, under a temporary name, flushes it,
// renames it into place and flushes the directory: from then on it is where
// replay starts, and the segments before it are deleted. The caller holds
// mu (or owns l alone) and no flush is running.
func (l *Log) startSegment(cp *frame, rest []byte) error {
	content := appendFrame(nil, cp)
	content = append(content, rest...)
	size := max(int64(len(content))+l.segBytes/2, l.segBytes)
	num := l.segNum + 1
	path := l.segPath(num)
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("cml: %w", err)
	}
	buf := make([]byte, size)
	copy(buf, content)
	if _, err = f.Write(buf); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(l.dir)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("cml: new checkpoint segment: %w", err)
	}
	if l.f != nil {
		l.f.Close()
	}
	for _, n := range l.segs {
		os.Remove(l.segPath(n))
	}
	l.f, l.segNum, l.off, l.size = f, num, int64(len(content)), size
	l.segs = []uint64{num}
	l.written += int64(len(content))
	l.synced = l.written
	return nil
}

// write appends framed bytes to the log (not flushed) and returns the
// position flush must reach for them. The caller holds mu.
func (l *Log) write(b []byte) (int64, error) {
	if l.err != nil {
		return 0, l.err
	}
	if l.off+int64(len(b)) > l.size {
		// The frames of the full segment are flushed before any of the new
		// one's can be acknowledged: a reader after a crash never finds a
		// hole before an acknowledged frame. mu stays held (a flush running
		// without it may flush the same file too): frames are written in
		// LSN order, by one writer at a time.
		if err := l.flushLocked(); err != nil {
			return 0, err
		}
		if err := l.newSegment(int64(len(b))); err != nil {
			l.err = err
			return 0, err
		}
	}
	if _, err := l.f.WriteAt(b, l.off); err != nil {
		l.err = fmt.Errorf("cml: write: %w", err)
		return 0, l.err
	}
	l.off += int64(len(b))
	l.written += int64(len(b))
	return l.written, nil
}

// flushLocked flushes f with mu held (a segment switch, a compaction).
func (l *Log) flushLocked() error {
	if l.synced == l.written {
		return nil
	}
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		l.err = fmt.Errorf("cml: flush: %w", err)
		return l.err
	}
	l.synced = l.written
	return nil
}

// waitFlushed returns once the log is flushed up to pos: a group commit. The
// first caller that finds no flush running flushes everything written so
// far, for itself and for every caller that wrote meanwhile; the others
// wait for it. No timer, no goroutine: a lone caller flushes at once, and
// concurrent appends (a build's or an untar's threads) share one
// fdatasync. The caller holds mu.
func (l *Log) waitFlushed(pos int64) error {
	for l.synced < pos {
		if l.err != nil {
			return l.err
		}
		if l.syncing {
			l.cond.Wait()
			continue
		}
		l.syncing = true
		target, f := l.written, l.f
		l.mu.Unlock()
		err := unix.Fdatasync(int(f.Fd()))
		l.mu.Lock()
		l.syncing = false
		for _, r := range l.retired {
			r.Close()
		}
		l.retired = nil
		if err != nil {
			// Linux may drop the dirty pages of a failed flush: what was
			// written cannot be known durable, ever. The log refuses
			// everything from now on.
			l.err = fmt.Errorf("cml: flush: %w", err)
		} else {
			l.synced = max(l.synced, target)
		}
		l.cond.Broadcast()
	}
	return nil
}

// writeFrames writes frames and waits until they are flushed.
func (l *Log) writeFrames(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	pos, err := l.write(b)
	if err != nil {
		return err
	}
	return l.waitFlushed(pos)
}

// Close flushes and closes the log. Records not yet reintegrated stay on
// disk for the next Open.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.syncing {
		l.cond.Wait()
	}
	if l.f == nil {
		return nil
	}
	err := l.err
	if err == nil {
		err = l.flushLocked()
	}
	l.f.Close()
	l.f = nil
	if l.err == nil {
		l.err = errors.New("cml: log closed")
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cml: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cml: flush %s: %w", dir, err)
	}
	return nil
}
