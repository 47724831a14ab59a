package nfs3

import (
	"testing"

	"snfs/xdr"
)

// Every argument decoder is fuzzed: it must never panic, and a value that decodes
// must encode to as many bytes as it consumed and decode again to the same encoding
// (padding bytes, which the decoder tolerates when non-zero, are the only freedom).

func fuzzArgs[T any, PT interface {
	*T
	xdr.Decoder
	xdr.Encoder
}](f *testing.F, seed PT) {
	var w xdr.Writer
	seed.Encode(&w)
	f.Add(w.Bytes())
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var v T
		r := xdr.NewReader(b)
		if PT(&v).Decode(r) != nil {
			return
		}
		var out xdr.Writer
		PT(&v).Encode(&out)
		if out.Len() != r.Offset() {
			t.Fatalf("decoded %d bytes but re-encodes to %d", r.Offset(), out.Len())
		}
		var v2 T
		if err := PT(&v2).Decode(xdr.NewReader(out.Bytes())); err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
		var out2 xdr.Writer
		PT(&v2).Encode(&out2)
		if string(out.Bytes()) != string(out2.Bytes()) {
			t.Fatalf("not a fixed point:\n%x\n%x", out.Bytes(), out2.Bytes())
		}
	})
}

var fh = FH{1, 2, 3, 4, 5, 6, 7, 8}
var mode = uint32(0o644)

func FuzzFHArgs(f *testing.F) { fuzzArgs(f, &FHArgs{FH: fh}) }
func FuzzSetattrArgs(f *testing.F) {
	fuzzArgs(f, &SetattrArgs{Object: fh, New: Sattr{Mode: &mode, Mtime: SetTime{How: SetToClientTime}}, Guard: &Time{1, 2}})
}
func FuzzDirOpArgs(f *testing.F)  { fuzzArgs(f, &DirOpArgs{Dir: fh, Name: "name"}) }
func FuzzAccessArgs(f *testing.F) { fuzzArgs(f, &AccessArgs{Object: fh, Access: 0x3f}) }
func FuzzReadArgs(f *testing.F)   { fuzzArgs(f, &ReadArgs{File: fh, Offset: 1 << 33, Count: 4096}) }
func FuzzWriteArgs(f *testing.F) {
	fuzzArgs(f, &WriteArgs{File: fh, Offset: 8, Count: 3, Stable: FileSync, Data: []byte("abc")})
}
func FuzzCreateArgs(f *testing.F) {
	fuzzArgs(f, &CreateArgs{Where: DirOpArgs{Dir: fh, Name: "f"}, Mode: Guarded, Attr: Sattr{Mode: &mode}})
}
func FuzzMkdirArgs(f *testing.F) { fuzzArgs(f, &MkdirArgs{Where: DirOpArgs{Dir: fh, Name: "d"}}) }
func FuzzSymlinkArgs(f *testing.F) {
	fuzzArgs(f, &SymlinkArgs{Where: DirOpArgs{Dir: fh, Name: "l"}, Path: "/t"})
}
func FuzzMknodArgs(f *testing.F) {
	fuzzArgs(f, &MknodArgs{Where: DirOpArgs{Dir: fh, Name: "n"}, Type: TypeChr, Spec: SpecData{1, 3}})
}
func FuzzRenameArgs(f *testing.F) {
	fuzzArgs(f, &RenameArgs{From: DirOpArgs{Dir: fh, Name: "a"}, To: DirOpArgs{Dir: fh, Name: "b"}})
}
func FuzzLinkArgs(f *testing.F) {
	fuzzArgs(f, &LinkArgs{File: fh, Link: DirOpArgs{Dir: fh, Name: "l"}})
}
func FuzzReaddirArgs(f *testing.F) { fuzzArgs(f, &ReaddirArgs{Dir: fh, Cookie: 9, Count: 4096}) }
func FuzzReaddirplusArgs(f *testing.F) {
	fuzzArgs(f, &ReaddirplusArgs{Dir: fh, Cookie: 9, DirCount: 512, MaxCount: 4096})
}
func FuzzCommitArgs(f *testing.F) { fuzzArgs(f, &CommitArgs{File: fh, Offset: 0, Count: 0}) }

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
