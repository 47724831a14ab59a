package snfs1

import (
	"bytes"
	"strings"
	"testing"

	"snfs/nfs3"
	"snfs/xdr"
	"snfs/xdr/xdrtest"
)

// The write-back permits' codecs (docs/protocol.md section 21): a value of
// every shape round-trips (every strict prefix refused), and the decoders
// refuse what their bounds and the union's arms refuse.

func cmlRecords() []CMLRecord {
	mode, size := uint32(0o640), uint64(7)
	attr := nfs3.Sattr{Mode: &mode, Size: &size, Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Sec: 9, Nsec: 1}}}
	return []CMLRecord{
		{LSN: 1, Op: CMLCreate, Dir: ObjRef{FH: testFH}, Name: "a.c", Attr: attr, New: 1},
		{LSN: 2, Op: CMLMkdir, Dir: ObjRef{FH: testFH}, Name: "d", New: 2},
		{LSN: 3, Op: CMLSymlink, Dir: ObjRef{Prov: 2}, Name: "l", Target: "../a.c", New: 3},
		{LSN: 4, Op: CMLLink, Obj: ObjRef{Prov: 1}, Dir: ObjRef{Prov: 2}, Name: "b.c"},
		{LSN: 5, Op: CMLUnlink, Dir: ObjRef{FH: testFH}, Name: "a.c"},
		{LSN: 6, Op: CMLRename, Dir: ObjRef{Prov: 2}, Name: "b.c", ToDir: ObjRef{FH: testFH}, ToName: strings.Repeat("n", nfs3.MaxName)},
		{LSN: 1 << 40, Op: CMLSetattr, Obj: ObjRef{Prov: 1}, Attr: attr},
		{LSN: 1<<40 + 1, Op: CMLRmdir, Dir: ObjRef{FH: testFH}, Name: "d"},
		{LSN: 1<<40 + 2, Op: CMLCreate, Open: true, Dir: ObjRef{FH: testFH}, Name: "o", Attr: attr, New: 4},
		{LSN: 1<<40 + 3, Op: CMLStore, Obj: ObjRef{Prov: 4}, Data: []byte("local data\n"), Atime: nfs3.Time{Sec: 5, Nsec: 6}, Mtime: nfs3.Time{Sec: 7, Nsec: 8}},
		{LSN: 1<<40 + 4, Op: CMLStore, Obj: ObjRef{FH: testFH}, Mtime: nfs3.Time{Sec: 1}},
	}
}

func TestPermitRoundTrip(t *testing.T) {
	full := make([]CMLRecord, ReintegrateMax)
	for i := range full {
		full[i] = CMLRecord{LSN: uint64(i + 1), Op: CMLCreate, Dir: ObjRef{FH: testFH}, Name: "f", New: uint64(i + 1)}
	}
	refs := []PermitRef{{Dir: testFH, Permit: 3}, {Dir: bytes.Repeat([]byte{9}, nfs3.FHSize), Permit: 1 << 63}}
	cases := map[string]struct {
		v   codec
		new func() codec
	}{
		"GetPermitArgs":           {&GetPermitArgs{Client: 3, Dir: testFH}, func() codec { return new(GetPermitArgs) }},
		"GetPermitRes/granted":    {&GetPermitRes{Granted: true, Permit: 1<<40 + 1}, func() codec { return new(GetPermitRes) }},
		"GetPermitRes/refused":    {&GetPermitRes{}, func() codec { return new(GetPermitRes) }},
		"GetPermitRes/stale":      {&GetPermitRes{Status: ErrStaleClientID}, func() codec { return new(GetPermitRes) }},
		"PermitReleaseArgs":       {&PermitReleaseArgs{Client: 3, Permits: refs}, func() codec { return new(PermitReleaseArgs) }},
		"PermitReleaseArgs/empty": {&PermitReleaseArgs{Client: 3}, func() codec { return new(PermitReleaseArgs) }},
		"ReintegrateArgs":         {&ReintegrateArgs{Client: 4, Permits: refs, Records: cmlRecords()}, func() codec { return new(ReintegrateArgs) }},
		"ReintegrateArgs/empty":   {&ReintegrateArgs{Client: 4}, func() codec { return new(ReintegrateArgs) }},
		"ReintegrateRes": {&ReintegrateRes{Applied: 6, Results: []CMLResult{
			{LSN: 5, Obj: testFH, Attr: testAttr}, {LSN: 6, Status: nfs3.ErrExist}, {LSN: 7, Obj: testFH, Permit: 9}},
			Dirs: []DirAttr{{Dir: testFH, Attr: *testAttr}, {Dir: nfs3.FH{1, 2}, Attr: nfs3.Fattr{Type: nfs3.TypeDir, Nlink: 2}}},
			Opens: []CMLOpen{{LSN: 5, ServerVerf: Verifier{1, 2, 3}, Open: OpenRes{OpenOK: OpenOK{CacheVersion: 3, CacheEnabled: true, Attr: testAttr}}},
				{LSN: 7, Open: OpenRes{Status: nfs3.ErrJukebox}}}},
			func() codec { return new(ReintegrateRes) }},
		"ReintegrateRes/none":    {&ReintegrateRes{Applied: 1 << 50}, func() codec { return new(ReintegrateRes) }},
		"ReintegrateRes/failure": {&ReintegrateRes{Status: ErrStaleClientID}, func() codec { return new(ReintegrateRes) }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) { xdrtest.RoundTrip(t, c.v, c.new) })
	}
	// The largest batch decodes (its every prefix is not tried: quadratic).
	var w xdr.Writer
	(&ReintegrateArgs{Client: 4, Permits: refs[:1], Records: full}).Encode(&w)
	var a ReintegrateArgs
	if err := a.Decode(xdr.NewReader(w.Bytes())); err != nil || len(a.Records) != ReintegrateMax {
		t.Fatalf("a batch of ReintegrateMax records: %v, %d records", err, len(a.Records))
	}
	// STORE records of StoreMax bytes up to ReintegrateStoreMax in all
	// decode, their data intact.
	stores := make([]CMLRecord, ReintegrateStoreMax/StoreMax)
	for i := range stores {
		stores[i] = CMLRecord{LSN: uint64(i + 1), Op: CMLStore, Obj: ObjRef{Prov: 1}, Data: bytes.Repeat([]byte{byte(i)}, StoreMax)}
	}
	w = xdr.Writer{}
	(&ReintegrateArgs{Client: 4, Records: stores}).Encode(&w)
	a = ReintegrateArgs{}
	if err := a.Decode(xdr.NewReader(w.Bytes())); err != nil || len(a.Records) != len(stores) {
		t.Fatalf("a batch of ReintegrateStoreMax bytes of STORE data: %v, %d records", err, len(a.Records))
	}
	for i := range a.Records {
		if !bytes.Equal(a.Records[i].Data, stores[i].Data) {
			t.Fatalf("STORE record %d: data differs", i)
		}
	}
}

func TestPermitDecodeBounds(t *testing.T) {
	w := func(f func(w *xdr.Writer)) []byte { var x xdr.Writer; f(&x); return x.Bytes() }
	rec := func(w *xdr.Writer, lsn uint64) {
		r := CMLRecord{LSN: lsn, Op: CMLUnlink, Dir: ObjRef{FH: testFH}, Name: "x"}
		r.encode(w)
	}
	cases := []struct {
		name string
		new  func() codec
		in   []byte
	}{
		{"PermitReleaseArgs/more than PermitReleaseMax", func() codec { return new(PermitReleaseArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(PermitReleaseMax + 1) })},
		{"ReintegrateArgs/more than ReintegrateMax", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(0); w.Uint32(ReintegrateMax + 1) })},
		{"ReintegrateArgs/huge count", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(0); w.Uint32(0xffffffff) })},
		{"ReintegrateArgs/LSNs out of order", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(0); w.Uint32(2); rec(w, 5); rec(w, 5) })},
		{"ReintegrateArgs/provisional id given twice", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) {
				w.Uint64(1)
				w.Uint32(0)
				w.Uint32(2)
				for lsn, name := range []string{"a", "b"} {
					r := CMLRecord{LSN: uint64(lsn + 1), Op: CMLCreate, Dir: ObjRef{FH: testFH}, Name: name, New: 7}
					r.encode(w)
				}
			})},
		{"ReintegrateArgs/op 0", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(0); w.Uint32(1); w.Uint64(1); w.Uint32(0) })},
		{"ReintegrateArgs/op 11", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(0); w.Uint32(1); w.Uint64(1); w.Uint32(11) })},
		{"ReintegrateArgs/STORE data longer than StoreMax", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) {
				w.Uint64(1)
				w.Uint32(0)
				w.Uint32(1)
				r := CMLRecord{LSN: 1, Op: CMLStore, Obj: ObjRef{Prov: 1}, Data: make([]byte, StoreMax+1)}
				r.encode(w)
			})},
		{"ReintegrateArgs/STORE data past ReintegrateStoreMax in all", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) {
				w.Uint64(1)
				w.Uint32(0)
				n := ReintegrateStoreMax/StoreMax + 1
				w.Uint32(uint32(n))
				for i := range n {
					r := CMLRecord{LSN: uint64(i + 1), Op: CMLStore, Obj: ObjRef{Prov: 1}, Data: make([]byte, StoreMax)}
					r.encode(w)
				}
			})},
		{"ReintegrateArgs/op 9", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(0); w.Uint32(1); w.Uint64(1); w.Uint32(9) })},
		{"ReintegrateArgs/provisional 0", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) {
				w.Uint64(1)
				w.Uint32(0)
				w.Uint32(1)
				w.Uint64(1)
				w.Uint32(uint32(CMLUnlink))
				w.Bool(true)
				w.Uint64(0)
				w.String("x")
			})},
		{"ReintegrateArgs/name longer than MaxName", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) {
				w.Uint64(1)
				w.Uint32(0)
				w.Uint32(1)
				w.Uint64(1)
				w.Uint32(uint32(CMLUnlink))
				w.Bool(false)
				w.Opaque(testFH)
				w.String(strings.Repeat("a", nfs3.MaxName+1))
			})},
		{"ReintegrateArgs/handle longer than FHSize", func() codec { return new(ReintegrateArgs) },
			w(func(w *xdr.Writer) {
				w.Uint64(1)
				w.Uint32(0)
				w.Uint32(1)
				w.Uint64(1)
				w.Uint32(uint32(CMLUnlink))
				w.Bool(false)
				w.Opaque(bytes.Repeat([]byte{1}, nfs3.FHSize+1))
			})},
		{"ReintegrateRes/more than ReintegrateMax results", func() codec { return new(ReintegrateRes) },
			w(func(w *xdr.Writer) { w.Uint32(0); w.Uint64(1); w.Uint32(ReintegrateMax + 1) })},
		{"ReintegrateRes/more than ReintegrateDirsMax dirs", func() codec { return new(ReintegrateRes) },
			w(func(w *xdr.Writer) { w.Uint32(0); w.Uint64(1); w.Uint32(0); w.Uint32(ReintegrateDirsMax + 1) })},
		{"GetPermitRes/bad bool", func() codec { return new(GetPermitRes) },
			w(func(w *xdr.Writer) { w.Uint32(0); w.Uint32(2) })},
	}
	for _, c := range cases {
		if err := c.new().Decode(xdr.NewReader(c.in)); err == nil {
			t.Errorf("%s: decoded", c.name)
		}
	}
}

func FuzzGetPermitArgs(f *testing.F) { xdrtest.FuzzDecoder(f, &GetPermitArgs{Client: 3, Dir: testFH}) }
func FuzzGetPermitRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &GetPermitRes{Granted: true, Permit: 5}, &GetPermitRes{Status: ErrStaleClientID})
}
func FuzzPermitReleaseArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &PermitReleaseArgs{Client: 3, Permits: []PermitRef{{Dir: testFH, Permit: 2}}})
}
func FuzzReintegrateArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ReintegrateArgs{Client: 3, Permits: []PermitRef{{Dir: testFH, Permit: 2}}, Records: cmlRecords()})
}
func FuzzReintegrateRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ReintegrateRes{Applied: 3, Results: []CMLResult{{LSN: 3, Obj: testFH, Attr: testAttr, Permit: 1}},
		Dirs: []DirAttr{{Dir: testFH, Attr: *testAttr}}},
		&ReintegrateRes{Status: ErrNoPermit})
}
