package nlm4

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

var fuzzShare = Share{CallerName: "c", FH: testFH, OH: []byte("o"), Mode: DenyWrite, Access: AccessReadWrite}

func FuzzTestArgs(f *testing.F) {
	fuzzDecoder(f, &TestArgs{Cookie: testCookie, Exclusive: true, Lock: testLock})
}
func FuzzTestRes(f *testing.F) {
	fuzzDecoder(f, &TestRes{Cookie: testCookie, Stat: Denied, Holder: testHolder},
		&TestRes{Cookie: testCookie, Stat: DeniedGracePeriod})
}
func FuzzLockArgs(f *testing.F) {
	fuzzDecoder(f, &LockArgs{Cookie: testCookie, Block: true, Exclusive: true, Lock: testLock, Reclaim: true, State: 3})
}
func FuzzCancArgs(f *testing.F) {
	fuzzDecoder(f, &CancArgs{Cookie: testCookie, Block: true, Lock: testLock})
}
func FuzzUnlockArgs(f *testing.F) {
	fuzzDecoder(f, &UnlockArgs{Cookie: testCookie, Lock: testLock})
}
func FuzzRes(f *testing.F) {
	fuzzDecoder(f, &Res{Cookie: testCookie, Stat: Blocked})
}
func FuzzShareArgs(f *testing.F) {
	fuzzDecoder(f, &ShareArgs{Cookie: testCookie, Share: fuzzShare, Reclaim: true})
}
func FuzzShareRes(f *testing.F) {
	fuzzDecoder(f, &ShareRes{Cookie: testCookie, Stat: Denied, Sequence: 1})
}
func FuzzNotify(f *testing.F) { fuzzDecoder(f, &Notify{Name: "client", State: 5}) }
