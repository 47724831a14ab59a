package nlm4

import (
	"testing"

	"snfs/xdr/xdrtest"
)

// Every decoder is fuzzed (xdrtest.FuzzDecoder): it must never panic, a value that decodes must encode
// to as many bytes as it consumed (non-zero padding, which the decoder tolerates,
// is the only freedom), and that encoding must decode to the same value.

var fuzzShare = Share{CallerName: "c", FH: testFH, OH: []byte("o"), Mode: DenyWrite, Access: AccessReadWrite}

func FuzzTestArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &TestArgs{Cookie: testCookie, Exclusive: true, Lock: testLock})
}
func FuzzTestRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &TestRes{Cookie: testCookie, Stat: Denied, Holder: testHolder},
		&TestRes{Cookie: testCookie, Stat: DeniedGracePeriod})
}
func FuzzLockArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &LockArgs{Cookie: testCookie, Block: true, Exclusive: true, Lock: testLock, Reclaim: true, State: 3})
}
func FuzzCancArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &CancArgs{Cookie: testCookie, Block: true, Lock: testLock})
}
func FuzzUnlockArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &UnlockArgs{Cookie: testCookie, Lock: testLock})
}
func FuzzRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &Res{Cookie: testCookie, Stat: Blocked})
}
func FuzzShareArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ShareArgs{Cookie: testCookie, Share: fuzzShare, Reclaim: true})
}
func FuzzShareRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ShareRes{Cookie: testCookie, Stat: Denied, Sequence: 1})
}
func FuzzNotify(f *testing.F) { xdrtest.FuzzDecoder(f, &Notify{Name: "client", State: 5}) }
