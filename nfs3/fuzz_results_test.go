package nfs3

import (
	"testing"

	"snfs/xdr"
)

type codec = Result

// resultTypes are the client-side decoders of every procedure's results.
var resultTypes = []func() codec{
	func() codec { return &GetattrRes{} },
	func() codec { return &WccRes{} },
	func() codec { return &LookupRes{} },
	func() codec { return &AccessRes{} },
	func() codec { return &ReadlinkRes{} },
	func() codec { return &ReadRes{} },
	func() codec { return &WriteRes{} },
	func() codec { return &CreateRes{} },
	func() codec { return &RenameRes{} },
	func() codec { return &LinkRes{} },
	func() codec { return &ReaddirRes{} },
	func() codec { return &ReaddirRes{Plus: true} },
	func() codec { return &FsstatRes{} },
	func() codec { return &FsinfoRes{} },
	func() codec { return &PathconfRes{} },
	func() codec { return &CommitRes{} },
}

// FuzzResults: every result decoder (the client's side of the protocol) is bounded
// and never panics; the first byte of the input picks the result type.
func FuzzResults(f *testing.F) {
	attr := &Fattr{Type: TypeReg, Size: 9}
	seeds := []codec{
		&GetattrRes{Attr: *attr},
		&LookupRes{Object: FH{1, 2}, ObjAttr: attr, DirAttr: attr},
		&ReadRes{Attr: attr, Count: 3, EOF: true, Data: []byte("abc")},
		&ReaddirRes{Plus: true, Entries: []Entry{{FileID: 1, Name: "a", Cookie: 2, Attr: attr, Handle: FH{3}}}, EOF: true},
	}
	for i, sd := range seeds {
		var w xdr.Writer
		sd.Encode(&w)
		sel := []byte{0, 2, 5, 11}[i]
		f.Add(append([]byte{sel}, w.Bytes()...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		mk := resultTypes[int(b[0])%len(resultTypes)]
		v := mk()
		r := xdr.NewReader(b[1:])
		if v.Decode(r) != nil {
			return
		}
		var out xdr.Writer
		v.Encode(&out)
		v2 := mk()
		if err := v2.Decode(xdr.NewReader(out.Bytes())); err != nil {
			t.Fatalf("%T: re-encoding does not decode: %v", v, err)
		}
	})
}
