package cachedir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// maxOffset bounds every size and offset the cache keeps, so that Off+Len
// never overflows.
const maxOffset = int64(1) << 62

// maxRanges bounds the ranges one entry may list; a file written in more
// pieces than this is refused a further write rather than given an index
// record that takes unbounded time and memory to decode.
const maxRanges = 1 << 16

// entry is what the index records about one cached file.
//
// Invariants (checked by decodeEntry, kept by File): valid and dirty are in
// normal form below size; dirty ⊆ valid (dirty bytes are in the data file);
// truncTo is only meaningful when truncated.
type entry struct {
	version   uint64   // server version the clean data is at (the consistency protocol's OPEN)
	size      int64    // file size as the cache knows it
	gen       uint64   // fill generation: bumped by every invalidation
	lastUse   int64    // Unix nanoseconds of the last read, write or fill
	truncated bool     // the size was set locally (Truncate) since the last write-back
	truncTo   int64    // the smallest size Truncate set since the last write-back
	valid     rangeSet // bytes present in the data file (clean or dirty)
	dirty     rangeSet // bytes written locally and not yet written back
	// What reintegration needs (format 2): the server's change attributes as
	// last seen in sync with this cache (conflict detection), and where the
	// file was last seen in the namespace (where a conflict copy goes).
	hasBase bool
	base    Base
	parent  []byte // the parent directory's handle; nil: unknown
	name    string // the file's name in parent
	// The identity the dirty data was written as (format 2, flagWriter):
	// a restarted mount writes it back as that user, as the mount that
	// wrote it would have (under root_squash the mount's own root is
	// squashed, and may not write the user's file).
	hasWriter bool
	writer    Writer
	// The mount is removing the file's last link (format 2, flagRemoving,
	// no payload): set durably before the REMOVE (or the RENAME over it)
	// goes out, so that a restarted mount whose reintegration finds the
	// file gone knows this client removed it, and drops the data instead
	// of keeping it as a conflict copy of another client's removal.
	removing bool
}

// Writer is the AUTH_SYS identity of the last writer of a file's dirty data.
type Writer struct {
	UID, GID uint32
	Groups   []uint32 // at most MaxWriterGroups
}

// MaxWriterGroups bounds a recorded writer's supplementary groups (AUTH_SYS
// carries 16).
const MaxWriterGroups = 16

func (w Writer) equal(v Writer) bool {
	return w.UID == v.UID && w.GID == v.GID && slices.Equal(w.Groups, v.Groups)
}

// Base is the server's change attributes of a file as the cache last saw
// them in sync with its data: when the server's file still has them, nobody
// else changed it since.
type Base struct {
	Size                uint64
	CtimeSec, CtimeNsec uint32
	MtimeSec, MtimeNsec uint32
}

// maxName bounds a recorded name (NFS names are shorter).
const maxName = 1024

func (e *entry) clone() entry {
	c := *e
	c.valid = rangeSet(e.valid.clone())
	c.dirty = rangeSet(e.dirty.clone())
	c.parent = append([]byte(nil), e.parent...)
	if e.parent == nil {
		c.parent = nil
	}
	c.writer.Groups = slices.Clone(e.writer.Groups)
	return c
}

// sameRecord reports whether e and d would be the same index record but for
// the last-use time.
func (e *entry) sameRecord(d *entry) bool {
	return e.version == d.version && e.size == d.size && e.gen == d.gen &&
		e.truncated == d.truncated && e.truncTo == d.truncTo &&
		slices.Equal(e.valid, d.valid) && slices.Equal(e.dirty, d.dirty) &&
		e.hasBase == d.hasBase && e.base == d.base && slices.Equal(e.parent, d.parent) && e.name == d.name &&
		e.hasWriter == d.hasWriter && e.writer.equal(d.writer) && e.removing == d.removing
}

// needsWriteBack reports whether the server lacks something of this file.
func (e *entry) needsWriteBack() bool { return len(e.dirty) > 0 || e.truncated }

// Encoding (big endian): a format byte (1 or 2), version u64, size u64, gen
// u64, lastUse u64, flags u8 (bit 0: truncated, bit 1: a base follows),
// truncTo u64, then the valid and the dirty ranges, each as a count u32
// followed by (off u64, len u64) pairs. Format 2 (written only when there is
// a base or an origin) adds: the base if flagged (size u64, ctime sec u32,
// nsec u32, mtime sec u32, nsec u32), the parent handle (length u32, bytes)
// and the name (length u32, bytes), then, if flagged (bit 2), the writer (uid
// u32, gid u32, a count u32 of at most 16 groups, each u32). Bit 3 (format
// 2 only, no payload): the file's last link is being removed.
const (
	entryFormat    = 1
	entryFormat2   = 2
	entryHeaderLen = 1 + 8 + 8 + 8 + 8 + 1 + 8
	flagTruncated  = 1
	flagBase       = 2
	flagWriter     = 4
	flagRemoving   = 8
	baseLen        = 8 + 4*4
)

func (e *entry) extended() bool {
	return e.hasBase || len(e.parent) > 0 || e.name != "" || e.hasWriter || e.removing
}

var errBadEntry = errors.New("cachedir: malformed index entry")

func (e *entry) encode() []byte {
	b := make([]byte, 0, entryHeaderLen+8+16*(len(e.valid)+len(e.dirty)))
	if e.extended() {
		b = append(b, entryFormat2)
	} else {
		b = append(b, entryFormat)
	}
	b = binary.BigEndian.AppendUint64(b, e.version)
	b = binary.BigEndian.AppendUint64(b, uint64(e.size))
	b = binary.BigEndian.AppendUint64(b, e.gen)
	b = binary.BigEndian.AppendUint64(b, uint64(e.lastUse))
	var flags byte
	if e.truncated {
		flags |= flagTruncated
	}
	if e.hasBase {
		flags |= flagBase
	}
	if e.hasWriter {
		flags |= flagWriter
	}
	if e.removing {
		flags |= flagRemoving
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(e.truncTo))
	for _, s := range []rangeSet{e.valid, e.dirty} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		for _, r := range s {
			b = binary.BigEndian.AppendUint64(b, uint64(r.Off))
			b = binary.BigEndian.AppendUint64(b, uint64(r.Len))
		}
	}
	if !e.extended() {
		return b
	}
	if e.hasBase {
		b = binary.BigEndian.AppendUint64(b, e.base.Size)
		for _, v := range []uint32{e.base.CtimeSec, e.base.CtimeNsec, e.base.MtimeSec, e.base.MtimeNsec} {
			b = binary.BigEndian.AppendUint32(b, v)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.parent)))
	b = append(b, e.parent...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.name)))
	b = append(b, e.name...)
	if e.hasWriter {
		b = binary.BigEndian.AppendUint32(b, e.writer.UID)
		b = binary.BigEndian.AppendUint32(b, e.writer.GID)
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.writer.Groups)))
		for _, g := range e.writer.Groups {
			b = binary.BigEndian.AppendUint32(b, g)
		}
	}
	return b
}

// decodeEntry parses an index record. It never panics, allocates at most in
// proportion to len(b), and accepts only entries that keep the invariants.
func decodeEntry(b []byte) (entry, error) {
	var e entry
	if len(b) < entryHeaderLen || (b[0] != entryFormat && b[0] != entryFormat2) {
		return e, fmt.Errorf("%w: short or unknown format", errBadEntry)
	}
	format := b[0]
	u64 := func(i int) uint64 { return binary.BigEndian.Uint64(b[i:]) }
	e.version = u64(1)
	size := u64(9)
	e.gen = u64(17)
	e.lastUse = int64(u64(25))
	flags := b[33]
	truncTo := u64(34)
	if size > uint64(maxOffset) || truncTo > uint64(maxOffset) || flags&^(flagTruncated|flagBase|flagWriter|flagRemoving) != 0 ||
		(format == entryFormat && flags&(flagBase|flagWriter|flagRemoving) != 0) {
		return entry{}, fmt.Errorf("%w: size out of range or unknown flags", errBadEntry)
	}
	e.size, e.truncTo, e.truncated = int64(size), int64(truncTo), flags&flagTruncated != 0
	e.removing = flags&flagRemoving != 0
	rest := b[entryHeaderLen:]
	for _, dst := range []*rangeSet{&e.valid, &e.dirty} {
		if len(rest) < 4 {
			return entry{}, fmt.Errorf("%w: truncated range list", errBadEntry)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if n > maxRanges || uint64(n)*16 > uint64(len(rest)) {
			return entry{}, fmt.Errorf("%w: range count %d", errBadEntry, n)
		}
		s := make(rangeSet, n)
		for i := range s {
			off, ln := binary.BigEndian.Uint64(rest), binary.BigEndian.Uint64(rest[8:])
			rest = rest[16:]
			if off > uint64(maxOffset) || ln > uint64(maxOffset) {
				return entry{}, fmt.Errorf("%w: range out of bounds", errBadEntry)
			}
			s[i] = Range{int64(off), int64(ln)}
		}
		if !s.normal(e.size) {
			return entry{}, fmt.Errorf("%w: ranges not sorted, disjoint and below the size", errBadEntry)
		}
		if n == 0 {
			s = nil
		}
		*dst = s
	}
	if format == entryFormat2 {
		var err error
		if rest, err = e.decodeExtension(rest, flags&flagBase != 0, flags&flagWriter != 0); err != nil {
			return entry{}, err
		}
		if !e.extended() {
			return entry{}, fmt.Errorf("%w: format 2 with nothing to extend", errBadEntry)
		}
	}
	if len(rest) != 0 {
		return entry{}, fmt.Errorf("%w: %d trailing bytes", errBadEntry, len(rest))
	}
	if !e.dirty.subsetOf(e.valid) {
		return entry{}, fmt.Errorf("%w: dirty bytes not present", errBadEntry)
	}
	return e, nil
}

// decodeExtension parses format 2's base, parent, name and writer.
func (e *entry) decodeExtension(rest []byte, hasBase, hasWriter bool) ([]byte, error) {
	if hasBase {
		if len(rest) < baseLen {
			return nil, fmt.Errorf("%w: truncated base", errBadEntry)
		}
		e.hasBase = true
		e.base.Size = binary.BigEndian.Uint64(rest)
		e.base.CtimeSec = binary.BigEndian.Uint32(rest[8:])
		e.base.CtimeNsec = binary.BigEndian.Uint32(rest[12:])
		e.base.MtimeSec = binary.BigEndian.Uint32(rest[16:])
		e.base.MtimeNsec = binary.BigEndian.Uint32(rest[20:])
		rest = rest[baseLen:]
	}
	field := func(limit int) ([]byte, error) {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: truncated origin", errBadEntry)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if n > uint32(limit) || int(n) > len(rest) {
			return nil, fmt.Errorf("%w: origin field of %d bytes", errBadEntry, n)
		}
		v := rest[:n]
		rest = rest[n:]
		return v, nil
	}
	p, err := field(MaxHandle)
	if err != nil {
		return nil, err
	}
	if len(p) > 0 {
		e.parent = append([]byte(nil), p...)
	}
	n, err := field(maxName)
	if err != nil {
		return nil, err
	}
	e.name = string(n)
	if hasWriter {
		if len(rest) < 12 {
			return nil, fmt.Errorf("%w: truncated writer", errBadEntry)
		}
		e.hasWriter = true
		e.writer.UID, e.writer.GID = binary.BigEndian.Uint32(rest), binary.BigEndian.Uint32(rest[4:])
		n := binary.BigEndian.Uint32(rest[8:])
		rest = rest[12:]
		if n > MaxWriterGroups || int(n)*4 > len(rest) {
			return nil, fmt.Errorf("%w: writer with %d groups", errBadEntry, n)
		}
		if n > 0 {
			e.writer.Groups = make([]uint32, n)
			for k := range e.writer.Groups {
				e.writer.Groups[k] = binary.BigEndian.Uint32(rest[4*k:])
			}
		}
		rest = rest[4*n:]
	}
	return rest, nil
}
