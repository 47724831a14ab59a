package snfs1

import (
	"bytes"
	"testing"

	"snfs/nfs3"
	"snfs/xdr"
	"snfs/xdr/xdrtest"
)

// RECLAIM_PERMIT's codecs (docs/protocol.md, "RECLAIM_PERMIT"): every shape
// round-trips (every strict prefix refused), and the decoders refuse more
// than SNFS_RECLAIM_PERMIT_MAX directories or ids and a handle longer than
// NFS3_FHSIZE.
func TestReclaimPermitCodec(t *testing.T) {
	dirs := []nfs3.FH{testFH, bytes.Repeat([]byte{9}, nfs3.FHSize)}
	cases := map[string]struct {
		v   codec
		new func() codec
	}{
		"ReclaimPermitArgs":       {&ReclaimPermitArgs{Client: 3, Dirs: dirs}, func() codec { return new(ReclaimPermitArgs) }},
		"ReclaimPermitArgs/empty": {&ReclaimPermitArgs{Client: 3}, func() codec { return new(ReclaimPermitArgs) }},
		"ReclaimPermitRes":        {&ReclaimPermitRes{Permits: []uint64{1<<40 + 1, 0}}, func() codec { return new(ReclaimPermitRes) }},
		"ReclaimPermitRes/none":   {&ReclaimPermitRes{}, func() codec { return new(ReclaimPermitRes) }},
		"ReclaimPermitRes/nograce": {&ReclaimPermitRes{Status: ErrNoGrace},
			func() codec { return new(ReclaimPermitRes) }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) { xdrtest.RoundTrip(t, c.v, c.new) })
	}
	w := func(f func(w *xdr.Writer)) []byte { var x xdr.Writer; f(&x); return x.Bytes() }
	bad := []struct {
		name string
		new  func() codec
		in   []byte
	}{
		{"ReclaimPermitArgs/more than ReclaimPermitMax", func() codec { return new(ReclaimPermitArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(ReclaimPermitMax + 1) })},
		{"ReclaimPermitArgs/huge count", func() codec { return new(ReclaimPermitArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(0xffffffff) })},
		{"ReclaimPermitArgs/handle longer than FHSize", func() codec { return new(ReclaimPermitArgs) },
			w(func(w *xdr.Writer) { w.Uint64(1); w.Uint32(1); w.Opaque(bytes.Repeat([]byte{1}, nfs3.FHSize+1)) })},
		{"ReclaimPermitRes/more than ReclaimPermitMax", func() codec { return new(ReclaimPermitRes) },
			w(func(w *xdr.Writer) { w.Uint32(0); w.Uint32(ReclaimPermitMax + 1) })},
	}
	for _, c := range bad {
		if err := c.new().Decode(xdr.NewReader(c.in)); err == nil {
			t.Errorf("%s: decoded", c.name)
		}
	}
	// The largest call decodes.
	full := make([]nfs3.FH, ReclaimPermitMax)
	for i := range full {
		full[i] = testFH
	}
	var x xdr.Writer
	(&ReclaimPermitArgs{Client: 1, Dirs: full}).Encode(&x)
	var a ReclaimPermitArgs
	if err := a.Decode(xdr.NewReader(x.Bytes())); err != nil || len(a.Dirs) != ReclaimPermitMax {
		t.Fatalf("ReclaimPermitMax directories: %v, %d", err, len(a.Dirs))
	}
}

func FuzzReclaimPermitArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ReclaimPermitArgs{Client: 3, Dirs: []nfs3.FH{testFH}})
}
func FuzzReclaimPermitRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ReclaimPermitRes{Permits: []uint64{5, 0}}, &ReclaimPermitRes{Status: ErrNoGrace})
}
