package nfs3

import (
	"testing"

	"snfs/xdr"
	"snfs/xdr/xdrtest"
)

// Every argument decoder is fuzzed (xdrtest.FuzzDecoder): it must never panic,
// and a value that decodes must encode to as many bytes as it consumed and decode
// again to the same value (padding bytes, which the decoder tolerates when
// non-zero, are the only freedom).

var fh = FH{1, 2, 3, 4, 5, 6, 7, 8}
var mode = uint32(0o644)

func FuzzFHArgs(f *testing.F) { xdrtest.FuzzDecoder(f, &FHArgs{FH: fh}) }
func FuzzSetattrArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &SetattrArgs{Object: fh, New: Sattr{Mode: &mode, Mtime: SetTime{How: SetToClientTime}}, Guard: &Time{1, 2}})
}
func FuzzDirOpArgs(f *testing.F)  { xdrtest.FuzzDecoder(f, &DirOpArgs{Dir: fh, Name: "name"}) }
func FuzzAccessArgs(f *testing.F) { xdrtest.FuzzDecoder(f, &AccessArgs{Object: fh, Access: 0x3f}) }
func FuzzReadArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ReadArgs{File: fh, Offset: 1 << 33, Count: 4096})
}
func FuzzWriteArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &WriteArgs{File: fh, Offset: 8, Count: 3, Stable: FileSync, Data: []byte("abc")})
}
func FuzzCreateArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &CreateArgs{Where: DirOpArgs{Dir: fh, Name: "f"}, Mode: Guarded, Attr: Sattr{Mode: &mode}})
}
func FuzzMkdirArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &MkdirArgs{Where: DirOpArgs{Dir: fh, Name: "d"}})
}
func FuzzSymlinkArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &SymlinkArgs{Where: DirOpArgs{Dir: fh, Name: "l"}, Path: "/t"})
}
func FuzzMknodArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &MknodArgs{Where: DirOpArgs{Dir: fh, Name: "n"}, Type: TypeChr, Spec: SpecData{1, 3}})
}
func FuzzRenameArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &RenameArgs{From: DirOpArgs{Dir: fh, Name: "a"}, To: DirOpArgs{Dir: fh, Name: "b"}})
}
func FuzzLinkArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &LinkArgs{File: fh, Link: DirOpArgs{Dir: fh, Name: "l"}})
}
func FuzzReaddirArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ReaddirArgs{Dir: fh, Cookie: 9, Count: 4096})
}
func FuzzReaddirplusArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ReaddirplusArgs{Dir: fh, Cookie: 9, DirCount: 512, MaxCount: 4096})
}
func FuzzCommitArgs(f *testing.F) { xdrtest.FuzzDecoder(f, &CommitArgs{File: fh, Offset: 0, Count: 0}) }

// FuzzPeekWrite: PeekWrite never panics, and whenever the real decoder accepts
// WRITE3args, PeekWrite accepts them too and reads the same file, offset, count and
// stable_how.
func FuzzPeekWrite(f *testing.F) {
	for _, st := range []StableHow{Unstable, DataSync, FileSync} {
		var w xdr.Writer
		(&WriteArgs{File: fh, Offset: 8, Count: 3, Stable: st, Data: []byte("abc")}).Encode(&w)
		f.Add(w.Bytes())
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 65})
	f.Fuzz(func(t *testing.T, b []byte) {
		head, ok := PeekWrite(b)
		var full WriteArgs
		if full.Decode(xdr.NewReader(b)) != nil {
			return
		}
		if !ok {
			t.Fatalf("Decode accepts %x, PeekWrite does not", b)
		}
		if string(head.File) != string(full.File) || head.Offset != full.Offset || head.Count != full.Count ||
			head.Stable != full.Stable || head.Data != nil {
			t.Fatalf("PeekWrite %+v, Decode %+v", head, full)
		}
	})
}

// FuzzPeekFH: PeekFH never panics and agrees with the decoders of arguments that
// start with a handle (here FHArgs and DirOpArgs).
func FuzzPeekFH(f *testing.F) {
	var w xdr.Writer
	(&DirOpArgs{Dir: fh, Name: "n"}).Encode(&w)
	f.Add(w.Bytes())
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 65})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := PeekFH(b)
		var a FHArgs
		if a.Decode(xdr.NewReader(b)) == nil && (!ok || string(got) != string(a.FH)) {
			t.Fatalf("FHArgs decodes %x, PeekFH says %x, %v", a.FH, got, ok)
		}
		var d DirOpArgs
		if d.Decode(xdr.NewReader(b)) == nil && (!ok || string(got) != string(d.Dir)) {
			t.Fatalf("DirOpArgs decodes %x, PeekFH says %x, %v", d.Dir, got, ok)
		}
	})
}
