package nsm

import (
	"reflect"
	"testing"

	"snfs/xdr"
)

// Every decoder is fuzzed: it must never panic, a value that decodes must encode
// to as many bytes as it consumed (non-zero padding, which the decoder tolerates,
// is the only freedom), and that encoding must decode to the same value.

func fuzzDecoder[T any, PT interface {
	*T
	xdr.Decoder
	xdr.Encoder
}](f *testing.F, seeds ...PT) {
	for _, s := range seeds {
		f.Add(encode(s))
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
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
		r2 := xdr.NewReader(out.Bytes())
		if err := PT(&v2).Decode(r2); err != nil {
			t.Fatalf("re-encoding %x does not decode: %v", out.Bytes(), err)
		}
		if r2.Remaining() != 0 {
			t.Fatalf("re-encoding leaves %d bytes", r2.Remaining())
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("decode(encode(v)) differs:\n%+v\n%+v", v, v2)
		}
	})
}

var fuzzMyID = MyID{MyName: "server", MyProg: 100021, MyVers: 3, MyProc: 16}

func FuzzName(f *testing.F)  { fuzzDecoder(f, &Name{MonName: "client"}) }
func FuzzMyID(f *testing.F)  { fuzzDecoder(f, &fuzzMyID) }
func FuzzMonID(f *testing.F) { fuzzDecoder(f, &MonID{MonName: "client", MyID: fuzzMyID}) }
func FuzzMon(f *testing.F) {
	fuzzDecoder(f, &Mon{MonID: MonID{MonName: "client", MyID: fuzzMyID}, Priv: testPriv})
}
func FuzzStatRes(f *testing.F) { fuzzDecoder(f, &StatRes{ResStat: StatSucc, State: 3}) }
func FuzzStat(f *testing.F)    { fuzzDecoder(f, &Stat{State: 3}) }
func FuzzStatChge(f *testing.F) {
	fuzzDecoder(f, &StatChge{MonName: "server", State: 5})
}
func FuzzStatus(f *testing.F) { fuzzDecoder(f, &Status{MonName: "client", State: 7, Priv: testPriv}) }
