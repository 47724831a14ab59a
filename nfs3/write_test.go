package nfs3

import (
	"bytes"
	"testing"

	"snfs/xdr"
)

func encode(e xdr.Encoder) []byte {
	var w xdr.Writer
	e.Encode(&w)
	return w.Bytes()
}

// TestPeekWrite: PeekWrite reads the fields before a WRITE's data as Decode does,
// and refuses what Decode refuses in them.
func TestPeekWrite(t *testing.T) {
	args := func(stable StableHow) []byte {
		return encode(&WriteArgs{File: fh, Offset: 1 << 40, Count: 3, Stable: stable, Data: []byte("abc")})
	}
	long := encode(&FHArgs{FH: make(FH, FHSize)})
	long[3]++ // a 65-byte handle
	badStable := args(Unstable)
	badStable[4+len(fh)+12+3] = 3
	for _, tc := range []struct {
		name   string
		b      []byte
		ok     bool
		stable StableHow
	}{
		{"unstable", args(Unstable), true, Unstable},
		{"data_sync", args(DataSync), true, DataSync},
		{"file_sync", args(FileSync), true, FileSync},
		{"no data", args(FileSync)[:4+len(fh)+16], true, FileSync}, // Decode refuses it, the head is whole
		{"truncated stable_how", args(Unstable)[:4+len(fh)+14], false, 0},
		{"handle only", encode(&FHArgs{FH: fh}), false, 0},
		{"handle too long", append(long, make([]byte, 64)...), false, 0},
		{"stable_how out of range", badStable, false, 0},
		{"empty", nil, false, 0},
	} {
		head, ok := PeekWrite(tc.b)
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if head.Stable != tc.stable || !bytes.Equal(head.File, fh) || head.Offset != 1<<40 || head.Count != 3 || head.Data != nil {
			t.Errorf("%s: peeked %+v", tc.name, head)
		}
	}
}

// TestPeekFH: the handle arguments start with, as DecodeFH reads it.
func TestPeekFH(t *testing.T) {
	b := encode(&DirOpArgs{Dir: fh, Name: "n"})
	if got, ok := PeekFH(b); !ok || !bytes.Equal(got, fh) {
		t.Errorf("PeekFH = %x, %v; want %x", got, ok, fh)
	}
	for _, b := range [][]byte{nil, {0, 0, 0}, {0, 0, 0, 8, 1, 2}, {0, 0, 0, 65}} {
		if _, ok := PeekFH(b); ok {
			t.Errorf("PeekFH(%x) accepted", b)
		}
	}
}
