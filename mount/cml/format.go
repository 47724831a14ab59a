package cml

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/xdr"
)

// The on-disk format (docs/mount.md, "The client modification log"). A
// segment file is a sequence of frames, then zeros (the segment is filled
// with zeros and flushed when it is made, so that an append writes into
// allocated blocks and its fdatasync flushes data only):
//
//	frame = length (u32) | CRC-32C of body (u32) | body (length bytes)
//	body  = kind (u32) | the kind's fields, in XDR
//
// A length of 0 is the end of the segment's frames. Reading stops at the
// first frame whose length is out of bounds or runs past the segment, whose
// CRC does not match, or whose body does not decode exactly.
const (
	frameHeader = 8
	// maxFrame bounds a frame's length when reading: the largest frame
	// written is a plan chunk of planChunkBytes plus one record.
	maxFrame = 2 << 20
	// planChunkBytes: a plan's records are written in frames of about this
	// many bytes (at least one record each).
	planChunkBytes = 256 << 10
	// maxRecordBytes bounds one encoded cmlrec1: two handles, two names,
	// attributes, a target of nfs3.MaxPath bytes.
	maxRecordBytes = 8 + 4 + 2*(4+4+nfs3.FHSize) + 2*(4+nfs3.MaxName+3) + 64 + 4 + nfs3.MaxPath + 8
	// maxAckHandles bounds an ack frame's handles (a batch gives at most
	// snfs1.ReintegrateMax; a checkpoint writes its map in frames of this).
	maxAckHandles = 4096
)

// Frame kinds.
const (
	// kindCheckpoint: the log's state starts again here: next LSN. Written
	// only first in a segment made whole (compaction, or a new log); the
	// segments before the newest such segment are dead.
	kindCheckpoint uint32 = 1
	// kindOp: one logged record: the time it was appended (Unix ns), then
	// the cmlrec1 (its LSN inside).
	kindOp uint32 = 2
	// kindPlan: part of the optimised log being reintegrated: the highest
	// raw LSN it covers, the time of the oldest raw record it covers, whether
	// this chunk is the last, then its records (cmlrec1, increasing LSN). A
	// plan counts only once its last chunk is read; the raw records up to
	// hi are then dead.
	kindPlan uint32 = 3
	// kindAck: a REINTEGRATE reply taken in: the server's last applied LSN
	// (plan records at or below it are done) and the real handles of the
	// provisional ids the batch made.
	kindAck uint32 = 4
	// kindSkip: the plan's first record (the LSN) is dropped: it failed at
	// the server and the client kept it as a conflict.
	kindSkip uint32 = 5
	// kindOpBased: kindOp, then the bases the record gave (base.go): the
	// names it changes first, what they held on the server before it.
	kindOpBased uint32 = 6
	// kindBase: bases of names the records after it change, written by a
	// compaction (base.go).
	kindBase uint32 = 7
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame is one decoded frame. Which fields it uses depends on kind.
type frame struct {
	kind    uint32
	next    uint64            // checkpoint
	at      int64             // op: Unix ns; plan: the oldest covered record's
	rec     snfs1.CMLRecord   // op
	hi      uint64            // plan
	last    bool              // plan
	recs    []snfs1.CMLRecord // plan
	applied uint64            // ack
	handles []provHandle      // ack
	lsn     uint64            // skip
	bases   []Base            // opBased, base
}

// provHandle is one provisional id's real handle.
type provHandle struct {
	prov uint64
	fh   nfs3.FH
}

var errFrame = errors.New("cml: bad frame")

// appendFrame appends f, framed, to b.
func appendFrame(b []byte, f *frame) []byte {
	w := xdr.NewWriter(nil)
	w.Uint32(f.kind)
	switch f.kind {
	case kindCheckpoint:
		w.Uint64(f.next)
	case kindOp:
		w.Uint64(uint64(f.at))
		f.rec.Encode(w)
	case kindOpBased:
		w.Uint64(uint64(f.at))
		f.rec.Encode(w)
		encodeBases(w, f.bases)
	case kindBase:
		encodeBases(w, f.bases)
	case kindPlan:
		w.Uint64(f.hi)
		w.Uint64(uint64(f.at))
		w.Bool(f.last)
		w.Uint32(uint32(len(f.recs)))
		for i := range f.recs {
			f.recs[i].Encode(w)
		}
	case kindAck:
		w.Uint64(f.applied)
		w.Uint32(uint32(len(f.handles)))
		for _, h := range f.handles {
			w.Uint64(h.prov)
			w.Opaque(h.fh)
		}
	case kindSkip:
		w.Uint64(f.lsn)
	}
	body := w.Bytes()
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(body, castagnoli))
	return append(b, body...)
}

// decodeFrame reads the frame at off in b: the frame, the offset after it,
// and false at the end of the frames (zeros) or at a frame cut short or
// damaged. Nothing of f aliases b. Every count is bounded before anything
// is allocated for it.
func decodeFrame(b []byte, off int) (f frame, next int, ok bool) {
	if off < 0 || off+frameHeader > len(b) {
		return frame{}, 0, false
	}
	n := int(binary.BigEndian.Uint32(b[off:]))
	sum := binary.BigEndian.Uint32(b[off+4:])
	if n < 4 || n > maxFrame || n > len(b)-off-frameHeader {
		return frame{}, 0, false
	}
	body := b[off+frameHeader : off+frameHeader+n]
	if crc32.Checksum(body, castagnoli) != sum {
		return frame{}, 0, false
	}
	if err := f.decodeBody(body); err != nil {
		return frame{}, 0, false
	}
	return f, off + frameHeader + n, true
}

func (f *frame) decodeBody(body []byte) error {
	r := xdr.NewReader(body)
	*f = frame{kind: r.Uint32()}
	switch f.kind {
	case kindCheckpoint:
		f.next = r.Uint64()
	case kindOp, kindOpBased:
		f.at = int64(r.Uint64())
		if f.rec.Decode(r) == nil {
			f.rec = cloneRecord(f.rec)
		}
		if f.kind == kindOpBased && r.Err() == nil {
			var ok bool
			if f.bases, ok = decodeBases(r); !ok {
				return fmt.Errorf("%w: bases", errFrame)
			}
		}
	case kindBase:
		var ok bool
		if f.bases, ok = decodeBases(r); !ok {
			return fmt.Errorf("%w: bases", errFrame)
		}
	case kindPlan:
		f.hi = r.Uint64()
		f.at = int64(r.Uint64())
		f.last = r.Bool()
		n := r.Uint32()
		// Each record takes at least 16 bytes (LSN, op, and one arm's
		// smallest field), so the count is bounded by what is left.
		if r.Err() == nil && (n > snfs1.ReintegrateMax || int(n) > r.Remaining()/16) {
			return fmt.Errorf("%w: plan of %d records", errFrame, n)
		}
		for i := uint32(0); i < n && r.Err() == nil; i++ {
			var c snfs1.CMLRecord
			if c.Decode(r) != nil {
				break
			}
			if i > 0 && c.LSN <= f.recs[i-1].LSN {
				return fmt.Errorf("%w: plan out of LSN order", errFrame)
			}
			f.recs = append(f.recs, cloneRecord(c))
		}
	case kindAck:
		f.applied = r.Uint64()
		n := r.Uint32()
		if r.Err() == nil && (n > maxAckHandles || int(n) > r.Remaining()/12) {
			return fmt.Errorf("%w: ack of %d handles", errFrame, n)
		}
		for i := uint32(0); i < n && r.Err() == nil; i++ {
			p := r.Uint64()
			fh := nfs3.DecodeFH(r)
			if r.Err() == nil && (p == 0 || len(fh) == 0) {
				return fmt.Errorf("%w: ack of provisional id %d", errFrame, p)
			}
			f.handles = append(f.handles, provHandle{p, append(nfs3.FH(nil), fh...)})
		}
	case kindSkip:
		f.lsn = r.Uint64()
	default:
		return fmt.Errorf("%w: kind %d", errFrame, f.kind)
	}
	if r.Err() != nil {
		return fmt.Errorf("%w: %w", errFrame, r.Err())
	}
	if r.Remaining() != 0 {
		return fmt.Errorf("%w: %d bytes after the body", errFrame, r.Remaining())
	}
	return nil
}

// cloneRecord copies c's handles out of whatever buffer they alias.
func cloneRecord(c snfs1.CMLRecord) snfs1.CMLRecord {
	for _, o := range []*snfs1.ObjRef{&c.Dir, &c.Obj, &c.ToDir} {
		if o.FH != nil {
			o.FH = append(nfs3.FH(nil), o.FH...)
		}
	}
	return c
}

// recordSize is rec's encoded size: what Bytes counts.
func recordSize(rec *snfs1.CMLRecord) int {
	w := xdr.NewWriter(nil)
	rec.Encode(w)
	return w.Len()
}

func unixNano(t int64) time.Time { return time.Unix(0, t) }
