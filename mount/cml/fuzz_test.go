package cml

import (
	"bytes"
	"testing"

	"snfs/nfs3"
	"snfs/snfs1"
)

// sampleFrames is one frame of each kind, framed one after the other.
func sampleFrames() []byte {
	rec := createIn(dD, "x")
	rec.LSN, rec.New = 7, 7
	ren := mv(pv(7), "x", dS, "y")
	ren.LSN = 8
	sym := snfs1.CMLRecord{LSN: 9, Op: snfs1.CMLSymlink, Dir: dD, Name: "l", Target: "t", New: 9, Attr: nfs3.Sattr{Mtime: nfs3.SetTime{How: nfs3.SetToServerTime}}}
	store := snfs1.CMLRecord{LSN: 10, Op: snfs1.CMLStore, Obj: pv(7), Data: []byte("the data"), Atime: nfs3.Time{Sec: 1}, Mtime: nfs3.Time{Sec: 2, Nsec: 3}}
	var b []byte
	b = appendFrame(b, &frame{kind: kindCheckpoint, next: 7})
	b = appendFrame(b, &frame{kind: kindOp, at: 123, rec: rec})
	b = appendFrame(b, &frame{kind: kindOp, at: 124, rec: store})
	un := snfs1.CMLRecord{LSN: 11, Op: snfs1.CMLUnlink, Dir: dD, Name: "u"}
	b = appendFrame(b, &frame{kind: kindOpBased, at: 125, rec: un, bases: []Base{{Dir: dD.FH, Name: "u", FH: nfs3.FH("was")}}})
	b = appendFrame(b, &frame{kind: kindBase, bases: []Base{{Dir: dD.FH, Name: "n"}, {Dir: dD.FH, Name: "u", FH: nfs3.FH("was")}}})
	b = appendFrame(b, &frame{kind: kindPlan, hi: 10, at: 123, last: true, recs: []snfs1.CMLRecord{rec, ren, sym, store}})
	b = appendFrame(b, &frame{kind: kindAck, applied: 8, handles: []provHandle{{7, nfs3.FH("handle")}}})
	b = appendFrame(b, &frame{kind: kindSkip, lsn: 9})
	return b
}

// FuzzDecode: a segment's bytes are whatever a crash (or a disk) left, so
// reading them never panics, never reads past the buffer, never allocates
// more than the bytes it reads bound, and stops at the first damaged
// frame; a frame that decodes encodes back to the very bytes it was read
// from.
func FuzzDecode(f *testing.F) {
	s := sampleFrames()
	f.Add(s)
	f.Add(s[:len(s)-3])
	f.Add(append(s[:20:20], 0xff, 0, 0, 0))
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		for off := 0; ; {
			fr, next, ok := decodeFrame(b, off)
			if !ok {
				break
			}
			if next <= off || next > len(b) {
				t.Fatalf("frame at %d ends at %d of %d", off, next, len(b))
			}
			if again := appendFrame(nil, &fr); !bytes.Equal(again, b[off:next]) {
				t.Fatalf("frame at %d (kind %d) does not encode back to its bytes", off, fr.kind)
			}
			off = next
		}
	})
}

// TestDecodeSample: every kind of frame reads back, and a flipped bit
// anywhere stops the reading at the frame it is in.
func TestDecodeSample(t *testing.T) {
	b := sampleFrames()
	var ends []int
	for off := 0; ; {
		_, next, ok := decodeFrame(b, off)
		if !ok {
			break
		}
		ends = append(ends, next)
		off = next
	}
	if len(ends) != 8 || ends[7] != len(b) {
		t.Fatalf("frames end at %v of %d", ends, len(b))
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		n := 0
		for off := 0; ; n++ {
			_, next, ok := decodeFrame(c, off)
			if !ok {
				break
			}
			off = next
		}
		k := 0
		for ends[k] <= i {
			k++
		}
		if n != k {
			t.Fatalf("a bit flipped at %d: %d frames read, want %d", i, n, k)
		}
	}
}
