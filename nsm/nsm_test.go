package nsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"snfs/xdr"
	"snfs/xdr/xdrtest"
)

type codec = xdrtest.Codec

var testPriv = [PrivSize]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func roundTrips() map[string]struct {
	v   codec
	new func() codec
} {
	type tc = struct {
		v   codec
		new func() codec
	}
	myID := MyID{MyName: "server", MyProg: 100021, MyVers: 3, MyProc: 16}
	long := strings.Repeat("h", MaxStrLen)
	return map[string]tc{
		"Name":             {&Name{MonName: "client.example"}, func() codec { return new(Name) }},
		"Name/empty":       {&Name{}, func() codec { return new(Name) }},
		"Name/MaxStrLen":   {&Name{MonName: long}, func() codec { return new(Name) }},
		"MyID":             {&myID, func() codec { return new(MyID) }},
		"MyID/negative":    {&MyID{MyName: long, MyProg: -1, MyVers: -2, MyProc: -3}, func() codec { return new(MyID) }},
		"MonID":            {&MonID{MonName: "client", MyID: myID}, func() codec { return new(MonID) }},
		"Mon":              {&Mon{MonID: MonID{MonName: "client", MyID: myID}, Priv: testPriv}, func() codec { return new(Mon) }},
		"Mon/MaxStrLen":    {&Mon{MonID: MonID{MonName: long, MyID: MyID{MyName: long}}}, func() codec { return new(Mon) }},
		"StatRes/succ":     {&StatRes{ResStat: StatSucc, State: 3}, func() codec { return new(StatRes) }},
		"StatRes/fail":     {&StatRes{ResStat: StatFail, State: -1}, func() codec { return new(StatRes) }},
		"Stat":             {&Stat{State: 1<<31 - 1}, func() codec { return new(Stat) }},
		"StatChge":         {&StatChge{MonName: "server", State: 5}, func() codec { return new(StatChge) }},
		"StatChge/max":     {&StatChge{MonName: long, State: -5}, func() codec { return new(StatChge) }},
		"Status":           {&Status{MonName: "client", State: 7, Priv: testPriv}, func() codec { return new(Status) }},
		"Status/MaxStrLen": {&Status{MonName: long, State: 1}, func() codec { return new(Status) }},
		"StatArgs (=Name)": {&StatArgs{MonName: "x"}, func() codec { return new(Name) }},
		"UnmonArgs":        {&UnmonArgs{MonName: "x", MyID: myID}, func() codec { return new(MonID) }},
		"UnmonAllArgs":     {&UnmonAllArgs{MyName: "me", MyProg: 100021, MyVers: 4, MyProc: 16}, func() codec { return new(MyID) }},
	}
}

func TestRoundTrip(t *testing.T) {
	for name, c := range roundTrips() {
		t.Run(name, func(t *testing.T) {
			xdrtest.RoundTrip(t, c.v, c.new)
		})
	}
}

// TestLinuxMonCall decodes an SM_MON call body built by hand as Linux's lockd
// sends it to its rpc.statd (fs/lockd/mon.c, nsm_mon_unmon and
// encode_mon_id/encode_priv): the peer's name (its address, unless
// nsm_use_hostnames is set), its own node name, NLM program
// 100021 version 3 procedure 16 to call back, and 16 private bytes.
func TestLinuxMonCall(t *testing.T) {
	body := xdrtest.HexBytes(t, `
		00000008 31302e30 2e322e32
		00000005 67756573 74000000
		000186b5 00000003 00000010
		0102030405060708090a0b0c0d0e0f10`)
	var m Mon
	r := xdr.NewReader(body)
	if err := m.Decode(r); err != nil {
		t.Fatal(err)
	}
	want := Mon{MonID: MonID{MonName: "10.0.2.2", MyID: MyID{MyName: "guest", MyProg: 100021, MyVers: 3, MyProc: 16}}, Priv: testPriv}
	if r.Remaining() != 0 || !reflect.DeepEqual(m, want) {
		t.Fatalf("decoded %+v (%d bytes left), want %+v", m, r.Remaining(), want)
	}
	if !bytes.Equal(xdrtest.Encode(&m), body) {
		t.Fatalf("re-encodes to %x", xdrtest.Encode(&m))
	}
}

// TestWire pins the byte layout of the other types.
func TestWire(t *testing.T) {
	for _, c := range []struct {
		v    xdr.Encoder
		want string
	}{
		{&Name{MonName: "abc"}, "00000003 61626300"},
		{&StatRes{ResStat: StatFail, State: 3}, "00000001 00000003"},
		{&Stat{State: 5}, "00000005"},
		{&StatChge{MonName: "host", State: 9}, "00000004 686f7374 00000009"},
		{&Status{MonName: "ab", State: -1, Priv: testPriv}, "00000002 61620000 ffffffff 0102030405060708090a0b0c0d0e0f10"},
		{&MonID{MonName: "a", MyID: MyID{MyName: "b", MyProg: 1, MyVers: 2, MyProc: 3}}, "00000001 61000000 00000001 62000000 00000001 00000002 00000003"},
	} {
		if got, want := hex.EncodeToString(xdrtest.Encode(c.v)), strings.Join(strings.Fields(c.want), ""); got != want {
			t.Errorf("%T %+v:\n got %s\nwant %s", c.v, c.v, got, want)
		}
	}
}

// TestNumbers pins the numbers of XNFS chapter 11 and sm_inter.x.
func TestNumbers(t *testing.T) {
	if Program != 100024 || Version != 1 || MaxStrLen != 1024 || PrivSize != 16 {
		t.Fatal("program, version or bounds")
	}
	for n, name := range map[int]string{ProcNull: "SM_NULL", ProcStat: "SM_STAT", ProcMon: "SM_MON", ProcUnmon: "SM_UNMON",
		ProcUnmonAll: "SM_UNMON_ALL", ProcSimuCrash: "SM_SIMU_CRASH", ProcNotify: "SM_NOTIFY"} {
		if ProcNames[n] != name {
			t.Errorf("ProcNames[%d] = %q, want %q", n, ProcNames[n], name)
		}
	}
	if ProcStat != 1 || ProcMon != 2 || ProcUnmon != 3 || ProcUnmonAll != 4 || ProcSimuCrash != 5 || ProcNotify != 6 {
		t.Fatal("procedure numbers")
	}
	if StatSucc != 0 || StatFail != 1 || StatSucc.String() != "STAT_SUCC" || StatFail.String() != "STAT_FAIL" {
		t.Fatal("res")
	}
}

// TestBounds: names past SM_MAXSTRLEN, a res outside its enum and a short
// priv are errors, and an oversized length is refused before any allocation.
func TestBounds(t *testing.T) {
	tooLong := "00000401" + strings.Repeat("00", 1028)
	for _, c := range []struct {
		name string
		v    codec
		in   string
		want error
	}{
		{"sm_name", new(Name), tooLong, xdr.ErrTooLong},
		{"sm_name 4 GiB", new(Name), "ffffffff", xdr.ErrTooLong},
		{"mon_name", new(MonID), tooLong, xdr.ErrTooLong},
		{"my_name", new(MonID), "00000001 61000000 " + tooLong, xdr.ErrTooLong},
		{"stat_chge", new(StatChge), tooLong + "00000001", xdr.ErrTooLong},
		{"status", new(Status), tooLong, xdr.ErrTooLong},
		{"res 2", new(StatRes), "00000002 00000001", xdr.ErrBadEnum},
		{"priv short", new(Status), "00000001 61000000 00000001 0102030405060708090a0b0c0d0e0f", xdr.ErrShort},
		{"mon priv short", new(Mon), "00000001 61000000 00000001 62000000 00000001 00000002 00000003 01020304", xdr.ErrShort},
	} {
		b := xdrtest.HexBytes(t, c.in)
		if err := c.v.Decode(xdr.NewReader(b)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
