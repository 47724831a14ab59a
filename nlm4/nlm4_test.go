package nlm4

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"snfs/nfs3"
	"snfs/xdr"
	"snfs/xdr/xdrtest"
)

type codec = xdrtest.Codec

var (
	testFH     = nfs3.FH{1, 2, 3, 4, 5, 6, 7, 8}
	testCookie = []byte{0, 0, 0, 42}
	testLock   = Lock{CallerName: "client.example", FH: testFH, OH: []byte("1234@client.example"), Svid: 1234,
		Offset: 1 << 40, Len: 4096}
	testHolder = Holder{Exclusive: true, Svid: -7, OH: []byte("99@other"), Offset: 10, Len: 0}
)

// roundTrips are one value of every argument and result type, in the shapes
// that matter: every status, the bounds, offsets past 2^63, empty netobjs.
func roundTrips() map[string]struct {
	v   codec
	new func() codec
} {
	type tc = struct {
		v   codec
		new func() codec
	}
	testA := func() codec { return new(TestArgs) }
	testR := func() codec { return new(TestRes) }
	lockA := func() codec { return new(LockArgs) }
	cancA := func() codec { return new(CancArgs) }
	unlA := func() codec { return new(UnlockArgs) }
	res := func() codec { return new(Res) }
	shA := func() codec { return new(ShareArgs) }
	shR := func() codec { return new(ShareRes) }
	notify := func() codec { return new(Notify) }
	maxLock := Lock{CallerName: strings.Repeat("h", MaxStrLen), FH: bytes.Repeat([]byte{0xfe}, MaxFH),
		OH: bytes.Repeat([]byte{0xee}, MaxNetobj), Svid: -1 << 31, Offset: 1<<64 - 1, Len: 1<<64 - 1}
	emptyLock := Lock{CallerName: "", FH: nfs3.FH{}, OH: []byte{}}
	m := map[string]tc{
		"TestArgs/shared":         {&TestArgs{Cookie: testCookie, Lock: testLock}, testA},
		"TestArgs/exclusive":      {&TestArgs{Cookie: testCookie, Exclusive: true, Lock: testLock}, testA},
		"TestArgs/bounds":         {&TestArgs{Cookie: bytes.Repeat([]byte{1}, MaxNetobj), Exclusive: true, Lock: maxLock}, testA},
		"TestArgs/empty netobjs":  {&TestArgs{Cookie: []byte{}, Lock: emptyLock}, testA},
		"TestRes/denied":          {&TestRes{Cookie: testCookie, Stat: Denied, Holder: testHolder}, testR},
		"TestRes/denied shared":   {&TestRes{Cookie: testCookie, Stat: Denied, Holder: Holder{Svid: 3, OH: []byte{}, Offset: 1<<63 + 1, Len: 1}}, testR},
		"LockArgs/blocking":       {&LockArgs{Cookie: testCookie, Block: true, Exclusive: true, Lock: testLock, State: 3}, lockA},
		"LockArgs/reclaim":        {&LockArgs{Cookie: testCookie, Exclusive: false, Lock: testLock, Reclaim: true, State: -5}, lockA},
		"LockArgs/bounds":         {&LockArgs{Cookie: bytes.Repeat([]byte{2}, MaxNetobj), Block: true, Lock: maxLock, Reclaim: true, State: 1<<31 - 1}, lockA},
		"CancArgs":                {&CancArgs{Cookie: testCookie, Block: true, Exclusive: true, Lock: testLock}, cancA},
		"CancArgs/nonblocking":    {&CancArgs{Cookie: testCookie, Lock: testLock}, cancA},
		"UnlockArgs":              {&UnlockArgs{Cookie: testCookie, Lock: testLock}, unlA},
		"UnlockArgs/to end":       {&UnlockArgs{Cookie: []byte{}, Lock: Lock{CallerName: "c", FH: testFH, OH: []byte{1}, Offset: 5}}, unlA},
		"ShareArgs":               {&ShareArgs{Cookie: testCookie, Share: Share{CallerName: "c", FH: testFH, OH: []byte("o"), Mode: DenyWrite, Access: AccessRead}}, shA},
		"ShareArgs/reclaim":       {&ShareArgs{Cookie: testCookie, Share: Share{CallerName: "c", FH: testFH, OH: []byte("o"), Mode: DenyReadWrite, Access: AccessReadWrite}, Reclaim: true}, shA},
		"ShareArgs/none":          {&ShareArgs{Cookie: testCookie, Share: Share{CallerName: "c", FH: testFH, OH: []byte("o"), Mode: DenyNone, Access: AccessNone}}, shA},
		"ShareArgs/deny read":     {&ShareArgs{Cookie: testCookie, Share: Share{CallerName: "c", FH: testFH, OH: []byte("o"), Mode: DenyRead, Access: AccessWrite}}, shA},
		"ShareRes":                {&ShareRes{Cookie: testCookie, Stat: Granted}, shR},
		"ShareRes/denied":         {&ShareRes{Cookie: testCookie, Stat: Denied, Sequence: -1}, shR},
		"Notify":                  {&Notify{Name: "client.example", State: 7}, notify},
		"Notify/MaxStrLen":        {&Notify{Name: strings.Repeat("n", MaxStrLen), State: -1}, notify},
		"Res/empty cookie":        {&Res{Cookie: []byte{}, Stat: Granted}, res},
		"Res/MaxNetobj cookie":    {&Res{Cookie: bytes.Repeat([]byte{3}, MaxNetobj), Stat: Blocked}, res},
		"GrantedArgs (=TestArgs)": {&GrantedArgs{Cookie: []byte("server-cookie"), Exclusive: true, Lock: testLock}, testA},
	}
	for s := Granted; s < numStats; s++ {
		m["Res/"+s.String()] = tc{&Res{Cookie: testCookie, Stat: s}, res}
		if s != Denied {
			m["TestRes/"+s.String()] = tc{&TestRes{Cookie: testCookie, Stat: s}, testR}
		}
		m["ShareRes/"+s.String()] = tc{&ShareRes{Cookie: testCookie, Stat: s}, shR}
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	for name, c := range roundTrips() {
		t.Run(name, func(t *testing.T) {
			xdrtest.RoundTrip(t, c.v, c.new)
		})
	}
}

// TestLinuxLockCall decodes a LOCK call body built by hand, field by field, as
// Linux's lockd client encodes it (fs/lockd/clnt4xdr.c, nlm4_xdr_enc_lockargs,
// with the arguments of fs/lockd/clntproc.c, nlmclnt_setlockargs): a 4-byte
// cookie from its counter, block for F_SETLKW, exclusive for F_WRLCK, the
// node name as caller_name, the NFSv3 handle, "<owner id>@<node name>" as the
// owner handle and the owner id as svid, a whole-file range (offset 0, length
// 0: how the client sends flock() and lockf(F_LOCK, 0)), and its NSM state.
func TestLinuxLockCall(t *testing.T) {
	body := xdrtest.HexBytes(t, `
		00000004 07000000
		00000001
		00000001
		00000005 67756573 74000000
		0000001c 0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c
		00000007 3140677565737400
		00000001
		0000000000000000
		0000000000000000
		00000000
		00000003`)
	var a LockArgs
	r := xdr.NewReader(body)
	if err := a.Decode(r); err != nil {
		t.Fatal(err)
	}
	if r.Remaining() != 0 {
		t.Fatalf("%d bytes left", r.Remaining())
	}
	fh := make(nfs3.FH, 28)
	for i := range fh {
		fh[i] = byte(i + 1)
	}
	want := LockArgs{Cookie: []byte{7, 0, 0, 0}, Block: true, Exclusive: true,
		Lock:  Lock{CallerName: "guest", FH: fh, OH: []byte("1@guest"), Svid: 1, Offset: 0, Len: 0},
		State: 3}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", a, want)
	}
	if !bytes.Equal(xdrtest.Encode(&a), body) {
		t.Fatalf("re-encodes to %x", xdrtest.Encode(&a))
	}
	// The decoded netobjs alias the call: a lock manager keeping one copies it.
	if &a.Lock.OH[0] != &body[64] {
		t.Fatal("owner handle does not alias the request")
	}
}

// TestWire pins the byte layout of the results and of the other arguments.
func TestWire(t *testing.T) {
	fh := nfs3.FH{0xaa, 0xbb, 0xcc}
	lk := Lock{CallerName: "ab", FH: fh, OH: []byte("o"), Svid: 2, Offset: 0x100, Len: 0x10}
	lkHex := "00000002 61620000 00000003 aabbcc00 00000001 6f000000 00000002 0000000000000100 0000000000000010"
	for _, c := range []struct {
		v    xdr.Encoder
		want string
	}{
		{&TestArgs{Cookie: []byte{9}, Exclusive: true, Lock: lk}, "00000001 09000000 00000001 " + lkHex},
		{&CancArgs{Cookie: []byte{9}, Block: true, Lock: lk}, "00000001 09000000 00000001 00000000 " + lkHex},
		{&UnlockArgs{Cookie: []byte{9}, Lock: lk}, "00000001 09000000 " + lkHex},
		{&LockArgs{Cookie: []byte{9}, Exclusive: true, Lock: lk, Reclaim: true, State: 5},
			"00000001 09000000 00000000 00000001 " + lkHex + " 00000001 00000005"},
		// nlm4_testrply: the holder only in the NLM4_DENIED arm.
		{&TestRes{Cookie: []byte{9}, Stat: Denied, Holder: Holder{Exclusive: true, Svid: -2, OH: []byte("xy"), Offset: 1, Len: 2}},
			"00000001 09000000 00000001 00000001 fffffffe 00000002 78790000 0000000000000001 0000000000000002"},
		{&TestRes{Cookie: []byte{9}, Stat: Granted, Holder: testHolder}, "00000001 09000000 00000000"},
		{&TestRes{Cookie: []byte{9}, Stat: DeniedGracePeriod, Holder: testHolder}, "00000001 09000000 00000004"},
		{&Res{Cookie: []byte{1, 2, 3, 4, 5}, Stat: Failed}, "00000005 0102030405000000 00000009"},
		{&ShareArgs{Cookie: []byte{}, Share: Share{CallerName: "ab", FH: fh, OH: []byte("o"), Mode: DenyWrite, Access: AccessReadWrite}, Reclaim: true},
			"00000000 00000002 61620000 00000003 aabbcc00 00000001 6f000000 00000002 00000003 00000001"},
		{&ShareRes{Cookie: []byte{}, Stat: DeniedNoLocks, Sequence: 0}, "00000000 00000002 00000000"},
		{&Notify{Name: "host", State: 9}, "00000004 686f7374 00000009"},
	} {
		if got := hex.EncodeToString(xdrtest.Encode(c.v)); got != strings.Join(strings.Fields(c.want), "") {
			t.Errorf("%T %+v:\n got %s\nwant %s", c.v, c.v, got, strings.Join(strings.Fields(c.want), ""))
		}
	}
}

// TestNumbers pins the numbers of RFC 1813 Appendix II and XNFS chapter 10.
func TestNumbers(t *testing.T) {
	if Program != 100021 || Version != 4 {
		t.Fatal("program or version")
	}
	procs := map[int]string{ProcNull: "NULL", ProcTest: "TEST", ProcLock: "LOCK", ProcCancel: "CANCEL",
		ProcUnlock: "UNLOCK", ProcGranted: "GRANTED", ProcTestMsg: "TEST_MSG", ProcLockMsg: "LOCK_MSG",
		ProcCancelMsg: "CANCEL_MSG", ProcUnlockMsg: "UNLOCK_MSG", ProcGrantedMsg: "GRANTED_MSG",
		ProcTestRes: "TEST_RES", ProcLockRes: "LOCK_RES", ProcCancelRes: "CANCEL_RES", ProcUnlockRes: "UNLOCK_RES",
		ProcGrantedRes: "GRANTED_RES", ProcShare: "SHARE", ProcUnshare: "UNSHARE", ProcNMLock: "NM_LOCK",
		ProcFreeAll: "FREE_ALL"}
	want := map[string]int{"NULL": 0, "TEST": 1, "LOCK": 2, "CANCEL": 3, "UNLOCK": 4, "GRANTED": 5,
		"TEST_MSG": 6, "LOCK_MSG": 7, "CANCEL_MSG": 8, "UNLOCK_MSG": 9, "GRANTED_MSG": 10, "TEST_RES": 11,
		"LOCK_RES": 12, "CANCEL_RES": 13, "UNLOCK_RES": 14, "GRANTED_RES": 15, "SHARE": 20, "UNSHARE": 21,
		"NM_LOCK": 22, "FREE_ALL": 23}
	for n, name := range procs {
		if want[name] != n || ProcNames[n] != name {
			t.Errorf("%s: number %d, ProcNames %q", name, n, ProcNames[n])
		}
	}
	for n := 16; n < 20; n++ {
		if ProcNames[n] != "" {
			t.Errorf("ProcNames[%d] = %q", n, ProcNames[n])
		}
	}
	stats := []string{"NLM4_GRANTED", "NLM4_DENIED", "NLM4_DENIED_NOLOCKS", "NLM4_BLOCKED",
		"NLM4_DENIED_GRACE_PERIOD", "NLM4_DEADLCK", "NLM4_ROFS", "NLM4_STALE_FH", "NLM4_FBIG", "NLM4_FAILED"}
	for i, s := range []Stat{Granted, Denied, DeniedNoLocks, Blocked, DeniedGracePeriod, Deadlock, ROFS, StaleFH, FBig, Failed} {
		if int(s) != i || s.String() != stats[i] {
			t.Errorf("%v = %d, want %s = %d", s, s, stats[i], i)
		}
	}
	if Granted.Err() != nil || !errors.Is(DeniedGracePeriod.Err(), DeniedGracePeriod) {
		t.Fatal("Err")
	}
	if DenyNone != 0 || DenyRead != 1 || DenyWrite != 2 || DenyReadWrite != 3 ||
		AccessNone != 0 || AccessRead != 1 || AccessWrite != 2 || AccessReadWrite != 3 {
		t.Fatal("fsh4_mode or fsh4_access")
	}
}

// TestSetStatus: every result can be made a failure by SetStatus alone, and a
// TestRes carries a holder only when Denied.
func TestSetStatus(t *testing.T) {
	for _, c := range []struct {
		x    Result
		want string
	}{
		{&Res{Cookie: []byte{1}}, "00000001 01000000 00000004"},
		{&TestRes{Cookie: []byte{1}, Holder: testHolder}, "00000001 01000000 00000004"},
		{&ShareRes{Cookie: []byte{1}}, "00000001 01000000 00000004 00000000"},
	} {
		c.x.SetStatus(DeniedGracePeriod)
		if got := hex.EncodeToString(xdrtest.Encode(c.x)); got != strings.Join(strings.Fields(c.want), "") {
			t.Errorf("%T: %s", c.x, got)
		}
	}
}

// TestBounds: a length past its bound is ErrTooLong before anything is read or
// allocated, whatever the bytes behind it; enums and booleans out of range are
// errors.
func TestBounds(t *testing.T) {
	u32 := func(v uint32) string {
		return hex.EncodeToString([]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	pad := func(n int) string { return strings.Repeat("00", (n+3)/4*4) }
	okLock := "00000001 63000000 00000001 01000000 00000001 6f000000 00000001 0000000000000000 0000000000000000"
	for _, c := range []struct {
		name string
		v    codec
		in   string
		want error
	}{
		{"cookie MaxNetobj+1", new(UnlockArgs), u32(MaxNetobj+1) + pad(MaxNetobj+1) + okLock, xdr.ErrTooLong},
		{"cookie 4 GiB", new(Res), "ffffffff 00000000", xdr.ErrTooLong},
		{"caller_name MaxStrLen+1", new(UnlockArgs), "00000000 " + u32(MaxStrLen+1) + pad(MaxStrLen+1), xdr.ErrTooLong},
		{"fh MaxFH+1", new(UnlockArgs), "00000000 00000001 63000000 " + u32(MaxFH+1) + pad(MaxFH+1), xdr.ErrTooLong},
		{"oh MaxNetobj+1", new(UnlockArgs), "00000000 00000001 63000000 00000000 " + u32(MaxNetobj+1) + pad(MaxNetobj+1), xdr.ErrTooLong},
		{"holder oh MaxNetobj+1", new(TestRes), "00000000 00000001 00000000 00000000 " + u32(MaxNetobj+1) + pad(MaxNetobj+1), xdr.ErrTooLong},
		{"share fh MaxFH+1", new(ShareArgs), "00000000 00000001 63000000 " + u32(MaxFH+1) + pad(MaxFH+1), xdr.ErrTooLong},
		{"notify name MaxStrLen+1", new(Notify), u32(MaxStrLen+1) + pad(MaxStrLen+1) + "00000000", xdr.ErrTooLong},
		{"fh longer than the call", new(UnlockArgs), "00000000 00000001 63000000 00000040 00000000", xdr.ErrShort},
		{"stat 10", new(Res), "00000000 0000000a", xdr.ErrBadEnum},
		{"testres stat 10", new(TestRes), "00000000 0000000a", xdr.ErrBadEnum},
		{"shareres stat -1", new(ShareRes), "00000000 ffffffff 00000000", xdr.ErrBadEnum},
		{"share mode 4", new(ShareArgs), "00000000 00000001 63000000 00000000 00000000 00000004 00000000 00000000", xdr.ErrBadEnum},
		{"share access 4", new(ShareArgs), "00000000 00000001 63000000 00000000 00000000 00000000 00000004 00000000", xdr.ErrBadEnum},
		{"block 2", new(LockArgs), "00000000 00000002 00000000 " + okLock + " 00000000 00000000", xdr.ErrBadBool},
		{"exclusive 2", new(TestArgs), "00000000 00000002 " + okLock, xdr.ErrBadBool},
		{"reclaim 2", new(LockArgs), "00000000 00000000 00000000 " + okLock + " 00000002 00000000", xdr.ErrBadBool},
		{"holder exclusive 2", new(TestRes), "00000000 00000001 00000002", xdr.ErrBadBool},
	} {
		b := xdrtest.HexBytes(t, c.in)
		if err := c.v.Decode(xdr.NewReader(b)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if n := allocBytes(func() { c.v.Decode(xdr.NewReader(b)) }); n > 512 {
			// The reader and the error's text; never a buffer of the
			// length the input claimed.
			t.Errorf("%s: %d bytes allocated per decode", c.name, n)
		}
	}
}

// TestAllocBytesSees: TestBounds's measure sees a string's copy (a control:
// a valid name of MaxStrLen bytes is copied into a string).
func TestAllocBytesSees(t *testing.T) {
	b := xdrtest.Encode(&Notify{Name: strings.Repeat("n", MaxStrLen)})
	var n Notify
	if got := allocBytes(func() { n.Decode(xdr.NewReader(b)) }); got < MaxStrLen {
		t.Fatalf("decoding a %d-byte name allocates %d bytes", MaxStrLen, got)
	}
}

// allocBytes is the number of bytes f allocates per call: the least of
// several means, because TotalAlloc counts the whole process and the runtime
// (the race detector, the GC's own work) sometimes allocates during a
// measurement; a buffer f itself allocates shows up in every one of them.
func allocBytes(f func()) uint64 {
	const runs, tries = 20, 5
	f()
	least := ^uint64(0)
	for range tries {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		least = min(least, (after.TotalAlloc-before.TotalAlloc)/runs)
	}
	return least
}
