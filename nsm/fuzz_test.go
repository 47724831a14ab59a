package nsm

import (
	"testing"

	"snfs/xdr/xdrtest"
)

// Every decoder is fuzzed (xdrtest.FuzzDecoder): it must never panic, a value that decodes must encode
// to as many bytes as it consumed (non-zero padding, which the decoder tolerates,
// is the only freedom), and that encoding must decode to the same value.

var fuzzMyID = MyID{MyName: "server", MyProg: 100021, MyVers: 3, MyProc: 16}

func FuzzName(f *testing.F)  { xdrtest.FuzzDecoder(f, &Name{MonName: "client"}) }
func FuzzMyID(f *testing.F)  { xdrtest.FuzzDecoder(f, &fuzzMyID) }
func FuzzMonID(f *testing.F) { xdrtest.FuzzDecoder(f, &MonID{MonName: "client", MyID: fuzzMyID}) }
func FuzzMon(f *testing.F) {
	xdrtest.FuzzDecoder(f, &Mon{MonID: MonID{MonName: "client", MyID: fuzzMyID}, Priv: testPriv})
}
func FuzzStatRes(f *testing.F) { xdrtest.FuzzDecoder(f, &StatRes{ResStat: StatSucc, State: 3}) }
func FuzzStat(f *testing.F)    { xdrtest.FuzzDecoder(f, &Stat{State: 3}) }
func FuzzStatChge(f *testing.F) {
	xdrtest.FuzzDecoder(f, &StatChge{MonName: "server", State: 5})
}
func FuzzStatus(f *testing.F) {
	xdrtest.FuzzDecoder(f, &Status{MonName: "client", State: 7, Priv: testPriv})
}
