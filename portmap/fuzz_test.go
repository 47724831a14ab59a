package portmap

import (
	"testing"

	"snfs/xdr"
)

// FuzzDecoders: the mapping and DUMP list decoders are bounded and never panic.
func FuzzDecoders(f *testing.F) {
	var w xdr.Writer
	(&Mapping{Prog: 100003, Vers: 3, Prot: ProtoTCP, Port: 2049}).Encode(&w)
	f.Add(w.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Mapping
		m.Decode(xdr.NewReader(b))
		var d dumpRes
		d.Decode(xdr.NewReader(b))
		if len(d) > 4096 {
			t.Fatal("DUMP list over its bound")
		}
	})
}
