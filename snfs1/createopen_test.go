package snfs1

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"snfs/nfs3"
	"snfs/xdr"
	"snfs/xdr/xdrtest"
)

func TestCreateOpenRoundTrip(t *testing.T) {
	mode := uint32(0o640)
	size := uint64(0)
	newA := func() codec { return new(CreateOpenArgs) }
	newR := func() codec { return new(CreateOpenRes) }
	ok := OpenOK{CacheVersion: 9, OldCacheVersion: 8, CacheEnabled: true, Attr: testAttr}
	wcc := nfs3.WccData{Before: &nfs3.WccAttr{Size: 4096, Mtime: nfs3.Time{Sec: 1}}, After: testAttr}
	for name, c := range map[string]struct {
		v   codec
		new func() codec
	}{
		"args/unchecked": {&CreateOpenArgs{Client: 3, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: testFH, Name: "a.c"},
			Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &mode, Size: &size}}}, newA},
		"args/guarded": {&CreateOpenArgs{Client: 3, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: testFH, Name: "b"},
			Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}}}, newA},
		"args/exclusive": {&CreateOpenArgs{Client: 1 << 40, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: testFH, Name: "c"},
			Mode: nfs3.Exclusive, Verf: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}}}, newA},
		"args/max name": {&CreateOpenArgs{Client: 3, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: testFH,
			Name: strings.Repeat("n", nfs3.MaxPath)}}}, newA},
		"res/opened":      {&CreateOpenRes{File: testFH, Attr: testAttr, DirWcc: wcc, ServerVerf: testVerf, Open: OpenRes{OpenOK: ok}}, newR},
		"res/no attr":     {&CreateOpenRes{File: testFH, Open: OpenRes{OpenOK: OpenOK{CacheVersion: 1, OldCacheVersion: 1}}}, newR},
		"res/not opened":  {&CreateOpenRes{File: testFH, Attr: testAttr, DirWcc: wcc, Open: OpenRes{Status: nfs3.ErrJukebox}}, newR},
		"res/exist":       {&CreateOpenRes{Status: nfs3.ErrExist, DirWcc: wcc}, newR},
		"res/bad handle":  {&CreateOpenRes{Status: nfs3.ErrBadHandle}, newR},
		"res/stale id":    {&CreateOpenRes{Status: ErrStaleClientID}, newR},
		"res/max handle":  {&CreateOpenRes{File: bytes.Repeat([]byte{7}, nfs3.FHSize), Open: OpenRes{Status: ErrFenced}}, newR},
		"res/open denied": {&CreateOpenRes{File: testFH, Open: OpenRes{Status: nfs3.ErrAcces}}, newR},
	} {
		t.Run(name, func(t *testing.T) { xdrtest.RoundTrip(t, c.v, c.new) })
	}
}

// TestCreateOpenWire pins the layout docs/protocol.md's CREATE_OPEN gives.
func TestCreateOpenWire(t *testing.T) {
	fh := nfs3.FH{0xaa, 0xbb, 0xcc}
	mode := uint32(0o644)
	for _, c := range []struct {
		v    xdr.Encoder
		want string
	}{
		{&CreateOpenArgs{Client: 2, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: fh, Name: "ab"}, Mode: nfs3.Guarded,
			Attr: nfs3.Sattr{Mode: &mode}}},
			"0000000000000002 00000003 aabbcc00 00000002 61620000 00000001" +
				" 00000001 000001a4 00000000 00000000 00000000 00000000 00000000"},
		{&CreateOpenArgs{Client: 2, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: fh, Name: "ab"}, Mode: nfs3.Exclusive,
			Verf: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}}},
			"0000000000000002 00000003 aabbcc00 00000002 61620000 00000002 0102030405060708"},
		{&CreateOpenRes{File: fh, Open: OpenRes{OpenOK: OpenOK{CacheVersion: 1, OldCacheVersion: 1, CacheEnabled: true}}},
			"00000000 00000003 aabbcc00 00000000 00000000 00000000 0000000000000000" +
				" 00000000 0000000000000001 0000000000000001 00000001 00000000"},
		{&CreateOpenRes{File: fh, ServerVerf: Verifier{1, 2, 3, 4, 5, 6, 7, 8}, Open: OpenRes{Status: nfs3.ErrJukebox}},
			"00000000 00000003 aabbcc00 00000000 00000000 00000000 0102030405060708 00002718"},
		{&CreateOpenRes{Status: nfs3.ErrExist}, "00000011 00000000 00000000"},
	} {
		want := strings.ReplaceAll(c.want, " ", "")
		if got := hex.EncodeToString(xdrtest.Encode(c.v)); got != want {
			t.Errorf("%T %+v:\n got %s\nwant %s", c.v, c.v, got, want)
		}
	}
}

// TestCreateOpenFailure: a failed CREATE_OPEN carries the directory's
// wcc_data and nothing of the file or the open, whatever the fields hold;
// SetStatus alone makes one.
func TestCreateOpenFailure(t *testing.T) {
	wcc := nfs3.WccData{After: testAttr}
	full := &CreateOpenRes{Status: nfs3.ErrExist, File: testFH, Attr: testAttr, DirWcc: wcc, Open: OpenRes{OpenOK: fuzzOK}}
	got := new(CreateOpenRes)
	if err := got.Decode(xdr.NewReader(xdrtest.Encode(full))); err != nil {
		t.Fatal(err)
	}
	if want := (&CreateOpenRes{Status: nfs3.ErrExist, DirWcc: wcc}); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	x := new(CreateOpenRes)
	x.SetStatus(ErrFenced)
	if b := xdrtest.Encode(x); hex.EncodeToString(b) != "000027750000000000000000" {
		t.Fatalf("%x", b)
	}
}

// TestCreateOpenRefused: what the decoders refuse (docs/protocol.md,
// "Notes on the encoding").
func TestCreateOpenRefused(t *testing.T) {
	long := append([]byte{0, 0, 0, nfs3.FHSize + 1}, make([]byte, nfs3.FHSize+4)...)
	for name, c := range map[string]struct {
		b   []byte
		new func() codec
	}{
		"args/bad createhow": {append(xdrtest.Encode(&CreateOpenArgs{Client: 1, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: testFH, Name: "a"}}})[:24], 0, 0, 0, 3),
			func() codec { return new(CreateOpenArgs) }},
		"args/dir handle too long": {append(make([]byte, 8), long...), func() codec { return new(CreateOpenArgs) }},
		"res/handle too long":      {append(make([]byte, 4), long...), func() codec { return new(CreateOpenRes) }},
		"res/bool not 0 or 1": {xdrtest.HexBytes(t, "00000000 00000003 aabbcc00 00000000 00000000 00000000 0000000000000000"+
			" 00000000 0000000000000001 0000000000000001 00000002 00000000"), func() codec { return new(CreateOpenRes) }},
	} {
		if err := c.new().Decode(xdr.NewReader(c.b)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if ProcNames[ProcCreateOpen] != "CREATE_OPEN" {
		t.Error("procedure name")
	}
}

// TestCreateOpenResCopiesFile: the decoded handle does not alias the
// reader's buffer (the reply buffer is reused).
func TestCreateOpenResCopiesFile(t *testing.T) {
	b := xdrtest.Encode(&CreateOpenRes{File: testFH, Open: OpenRes{OpenOK: fuzzOK}})
	got := new(CreateOpenRes)
	if err := got.Decode(xdr.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if !bytes.Equal(got.File, testFH) {
		t.Fatal("CreateOpenRes.File aliases the reader's buffer")
	}
}
