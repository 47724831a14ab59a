package drcstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"snfs/sunrpc"
)

// Defaults for Open's bounds.
const (
	// DefaultMaxCount covers the replies made in the window in which a client
	// can still be waiting for one when the server dies, with room to spare.
	DefaultMaxCount = 8192
	// DefaultMaxAge covers a restart of the server's machine: the clients
	// retransmit when it is back.
	DefaultMaxAge = 10 * time.Minute
)

// DirName is the log's directory in the state directory.
const DirName = "replies"

const (
	segSuffix = ".log"
	// maxSegBytes bounds a segment's preallocation; a save that does not fit
	// in what is left goes to a new segment.
	maxSegBytes = 1 << 20
	headerLen   = 8 // a record's length and CRC-32C
	// maxRecord bounds a record's length when reading (a larger one is torn).
	maxRecord = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Store is a sunrpc.ReplyStore over a log of segment files.
type Store struct {
	dir      string
	maxCount int
	maxAge   time.Duration
	now      func() time.Time

	// The rest is used by Load and Save only, which are called from one
	// goroutine at a time (sunrpc.ReplyStore), so it needs no lock.
	segs    []segment // oldest first; the last is the one written, if cur is set
	cur     *os.File  // the segment written (nil: none yet in this run)
	off     int64     // where the next save writes in cur
	size    int64     // cur's preallocated size
	segRecs int       // records after which a new segment starts
	next    uint64    // the next segment's number
	count   int       // records in segs
}

// segment is what the bounds need to know of a segment file.
type segment struct {
	num    uint64
	count  int
	newest time.Time
}

// Open opens (making it if needed) the log in stateDir, keeping at most
// maxCount replies (0: DefaultMaxCount) for at most maxAge (0: DefaultMaxAge).
func Open(stateDir string, maxCount int, maxAge time.Duration) (*Store, error) {
	if maxCount <= 0 {
		maxCount = DefaultMaxCount
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	dir := filepath.Join(stateDir, DirName)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, fmt.Errorf("drcstore: %w", err)
		}
		if err := syncDir(stateDir); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("drcstore: %w", err)
	}
	// A segment holds a quarter of the bound: deleting the oldest keeps
	// between maxCount and maxCount and a quarter replies on disk.
	s := &Store{dir: dir, maxCount: maxCount, maxAge: maxAge, now: time.Now, segRecs: max(1, maxCount/4), next: 1}
	nums, err := s.segNums()
	if err != nil {
		return nil, err
	}
	if len(nums) > 0 {
		s.next = nums[len(nums)-1] + 1
	}
	return s, nil
}

// segNums returns the numbers of the segment files, in order.
func (s *Store) segNums() ([]uint64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("drcstore: %w", err)
	}
	var nums []uint64
	for _, de := range ents {
		n, err := strconv.ParseUint(strings.TrimSuffix(de.Name(), segSuffix), 10, 64)
		if err == nil && strings.HasSuffix(de.Name(), segSuffix) {
			nums = append(nums, n)
		}
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	return nums, nil
}

// MaxAge returns the age bound.
func (s *Store) MaxAge() time.Duration { return s.maxAge }

// Close closes the segment being written.
func (s *Store) Close() error {
	if s.cur == nil {
		return nil
	}
	err := s.cur.Close()
	s.cur = nil
	return err
}

func (s *Store) segPath(num uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%016d%s", num, segSuffix))
}

// Load calls f with the newest MaxCount saved replies not older than MaxAge,
// oldest first.
func (s *Store) Load(f func(sunrpc.SavedReply)) error {
	nums, err := s.segNums()
	if err != nil {
		return err
	}
	var all []sunrpc.SavedReply
	s.segs, s.count = nil, 0
	for _, n := range nums {
		s.next = max(s.next, n+1)
		seg := segment{num: n}
		err := readSegment(s.segPath(n), func(r sunrpc.SavedReply) {
			all = append(all, r)
			seg.count++
			if r.At.After(seg.newest) {
				seg.newest = r.At
			}
		})
		if err != nil {
			return err
		}
		if seg.count == 0 {
			// Made by a server that saved nothing in it (each start
			// writes into a new segment): nothing to keep, and a
			// megabyte of zeros for every later start to read.
			if err := os.Remove(s.segPath(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("drcstore: %w", err)
			}
			continue
		}
		s.segs = append(s.segs, seg)
		s.count += seg.count
	}
	cutoff := s.now().Add(-s.maxAge)
	for _, r := range all[max(0, len(all)-s.maxCount):] {
		if !r.At.Before(cutoff) {
			f(r)
		}
	}
	return nil
}

// readChunk is how much of a segment readSegment reads at a time: a segment
// is preallocated with zeros, and one a start saved little in is mostly
// zeros that need not be read.
const readChunk = 64 << 10

// readSegment calls f with each record of the segment at path, in order,
// reading only as far as its last record.
func readSegment(path string, f func(sunrpc.SavedReply)) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("drcstore: %w", err)
	}
	defer file.Close()
	var b []byte // read from the file, from its offset base on
	base, eof := int64(0), false
	fill := func(need int) error { // until b holds need bytes, or the file ends
		for len(b) < need && !eof {
			chunk := make([]byte, max(readChunk, need-len(b)))
			n, err := file.ReadAt(chunk, base+int64(len(b)))
			b = append(b, chunk[:n]...)
			if errors.Is(err, io.EOF) {
				eof = true
			} else if err != nil {
				return fmt.Errorf("drcstore: %w", err)
			}
		}
		return nil
	}
	for off := 0; ; {
		if err := fill(off + headerLen); err != nil {
			return err
		}
		if off+headerLen <= len(b) {
			if n := int(binary.BigEndian.Uint32(b[off:])); n > 0 && n <= maxRecord {
				if err := fill(off + headerLen + n); err != nil {
					return err
				}
			}
		}
		r, next, ok := readRecord(b, off)
		if !ok {
			return nil
		}
		f(r)
		off = next
		if off > readChunk {
			// Keep only what is not parsed yet.
			b = append([]byte(nil), b[off:]...)
			base += int64(off)
			off = 0
		}
	}
}

// readRecord parses the record at off in b: the reply, the offset after it,
// and false at the end (zeros) or at a record cut short or damaged.
func readRecord(b []byte, off int) (sunrpc.SavedReply, int, bool) {
	if off+headerLen > len(b) {
		return sunrpc.SavedReply{}, 0, false
	}
	n := int(binary.BigEndian.Uint32(b[off:]))
	sum := binary.BigEndian.Uint32(b[off+4:])
	if n == 0 || n > maxRecord || off+headerLen+n > len(b) {
		return sunrpc.SavedReply{}, 0, false
	}
	rec := b[off+headerLen : off+headerLen+n]
	if crc32.Checksum(rec, castagnoli) != sum {
		return sunrpc.SavedReply{}, 0, false
	}
	r, ok := decode(rec)
	return r, off + headerLen + n, ok
}

// Save appends rs to the log with one write and one fdatasync, then deletes
// the segments the bounds no longer need.
func (s *Store) Save(rs []sunrpc.SavedReply) error {
	var buf []byte
	for i := range rs {
		rec := encode(&rs[i])
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(rec)))
		buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(rec, castagnoli))
		buf = append(buf, rec...)
	}
	last := len(s.segs) - 1
	if s.cur == nil || s.off+int64(len(buf)) > s.size || s.segs[last].count >= s.segRecs {
		if err := s.newSegment(int64(len(buf))); err != nil {
			return err
		}
		last = len(s.segs) - 1
	}
	if _, err := s.cur.WriteAt(buf, s.off); err != nil {
		return fmt.Errorf("drcstore: save %d replies: %w", len(rs), err)
	}
	if err := unix.Fdatasync(int(s.cur.Fd())); err != nil {
		return fmt.Errorf("drcstore: save %d replies: flush: %w", len(rs), err)
	}
	s.off += int64(len(buf))
	seg := &s.segs[last]
	for i := range rs {
		if rs[i].At.After(seg.newest) {
			seg.newest = rs[i].At
		}
	}
	seg.count += len(rs)
	s.count += len(rs)
	s.trim()
	return nil
}

// newSegment starts a segment of at least n bytes: filled with zeros and
// flushed, and its name flushed to the directory, before it is written to.
func (s *Store) newSegment(n int64) error {
	size := max(n, min(int64(s.segRecs)*512, maxSegBytes), 4096)
	num := s.next
	path := s.segPath(num)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("drcstore: %w", err)
	}
	if _, err := f.Write(make([]byte, size)); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("drcstore: new segment: %w", err)
	}
	if s.cur != nil {
		s.cur.Close()
	}
	s.cur, s.off, s.size, s.next = f, 0, size, num+1
	s.segs = append(s.segs, segment{num: num})
	return nil
}

// trim deletes the oldest segments that the bounds no longer need: those
// whose replies are all past the age bound, and those whose newer segments
// hold the count bound. The segment being written stays. A deletion that a
// crash undoes only leaves older replies, which Load bounds again.
func (s *Store) trim() {
	cutoff := s.now().Add(-s.maxAge)
	for len(s.segs) > 1 {
		old := s.segs[0]
		if s.count-old.count < s.maxCount && !old.newest.Before(cutoff) {
			return
		}
		if err := os.Remove(s.segPath(old.num)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return // tried again at the next save
		}
		s.segs = s.segs[1:]
		s.count -= old.count
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("drcstore: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("drcstore: flush %s: %w", dir, err)
	}
	return nil
}

// A record is the time the reply was made (Unix nanoseconds, 8 bytes), the
// key's xid, program, version, procedure, argument checksum and argument
// length (4 bytes each), the client's address (2 bytes of length, then the
// bytes), then the reply. The length's top bit marks an intent
// (SavedReply.Intent): an address is never that long.
const fixedLen = 8 + 6*4 + 2

const intentBit = 1 << 15

func encode(r *sunrpc.SavedReply) []byte {
	k := &r.Key
	b := make([]byte, 0, fixedLen+len(k.Addr)+len(r.Reply))
	b = binary.BigEndian.AppendUint64(b, uint64(r.At.UnixNano()))
	for _, v := range []uint32{k.XID, k.Prog, k.Vers, k.Proc, k.Sum, k.Len} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	n := uint16(len(k.Addr))
	if r.Intent {
		n |= intentBit
	}
	b = binary.BigEndian.AppendUint16(b, n)
	b = append(b, k.Addr...)
	return append(b, r.Reply...)
}

// decode parses a record, copying out of v.
func decode(v []byte) (sunrpc.SavedReply, bool) {
	if len(v) < fixedLen {
		return sunrpc.SavedReply{}, false
	}
	var r sunrpc.SavedReply
	r.At = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
	u := func(i int) uint32 { return binary.BigEndian.Uint32(v[8+4*i:]) }
	r.Key = sunrpc.DRCKey{XID: u(0), Prog: u(1), Vers: u(2), Proc: u(3), Sum: u(4), Len: u(5)}
	n16 := binary.BigEndian.Uint16(v[fixedLen-2:])
	r.Intent = n16&intentBit != 0
	n := int(n16 &^ intentBit)
	if len(v) < fixedLen+n {
		return sunrpc.SavedReply{}, false
	}
	r.Key.Addr = string(v[fixedLen : fixedLen+n])
	r.Reply = append([]byte(nil), v[fixedLen+n:]...)
	return r, true
}
