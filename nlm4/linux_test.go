package nlm4

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"snfs/nfs3"
	"snfs/xdr"
	"snfs/xdr/xdrtest"
)

// TestLinuxCapturedCalls decodes the NLM calls a real Linux kernel client sent
// (testdata/linux-6.1-calls.txt: how they were captured is in its header),
// checks every field, and checks that each re-encodes to the bytes it sent.
//
// The other direction was checked once by hand with the same guest and
// stand-in server (it needs port 111 and the guest, so it is no unit test):
// the client took this package's Res (GRANTED, BLOCKED, DENIED: lockf failed
// with EAGAIN) and TestRes (GRANTED: F_GETLK said F_UNLCK; DENIED with a
// holder exclusive, svid 4242, offset 100, length 50: F_GETLK said F_WRLCK,
// start 100, length 50, pid -4242).
func TestLinuxCapturedCalls(t *testing.T) {
	f, err := os.Open("testdata/linux-6.1-calls.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The snfs handle of the file the guest locked, as the server issued it.
	fh := nfs3.FH{0x02, 0xf1, 0x2d, 0x87, 0xd0, 0x0c, 0, 0, 0, 0x01, 0xa8, 0x61, 0x33, 0, 0xf7, 0x8a,
		0xe8, 0x08, 0xc4, 0x33, 0xfe, 0xf0, 0xc3, 0xfc}
	// Linux's cookie is its 32-bit call counter in host (little-endian) order;
	// its owner handle is "<owner id>@<host name>", the owner id also the svid.
	lk := func(caller string, owner int32, off, n uint64) Lock {
		return Lock{CallerName: caller, FH: fh, OH: []byte(strconv.Itoa(int(owner)) + "@" + caller), Svid: owner, Offset: off, Len: n}
	}
	want := []xdr.Decoder{
		&TestArgs{Cookie: []byte{0x35, 0x12, 0, 0}, Exclusive: true, Lock: lk("nlmguest", 0, 4096, 8192)},
		&LockArgs{Cookie: []byte{0x36, 0x12, 0, 0}, Lock: lk("nlmguest", 1, 0, 0), State: 3},
		&UnlockArgs{Cookie: []byte{0x37, 0x12, 0, 0}, Lock: lk("nlmguest", 1, 0, 0)},
		&LockArgs{Cookie: []byte{0x38, 0x12, 0, 0}, Block: true, Exclusive: true, Lock: lk("nlmguest", 2, 0, 0), State: 3},
		&UnlockArgs{Cookie: []byte{0x38, 0x12, 0, 0}, Lock: lk("nlmguest", 2, 0, 0)},
		&CancArgs{Cookie: []byte{0x39, 0x12, 0, 0}, Block: true, Exclusive: true, Lock: lk("nlmguest", 2, 0, 0)},
		&LockArgs{Cookie: []byte{0x37, 0x12, 0, 0}, Exclusive: true, Lock: lk("(none)", 1, 10, 100), State: 0},
		&UnlockArgs{Cookie: []byte{0x39, 0x12, 0, 0}, Lock: lk("(none)", 1, 10, 100)},
	}
	types := map[string]func() xdr.Decoder{
		"TEST":   func() xdr.Decoder { return new(TestArgs) },
		"LOCK":   func() xdr.Decoder { return new(LockArgs) },
		"UNLOCK": func() xdr.Decoder { return new(UnlockArgs) },
		"CANCEL": func() xdr.Decoder { return new(CancArgs) },
	}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<16)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		proc, hx, ok := strings.Cut(line, " ")
		b, err := hex.DecodeString(hx)
		if !ok || err != nil || types[proc] == nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		if n >= len(want) {
			t.Fatalf("more calls than expected: %q", line)
		}
		got := types[proc]()
		r := xdr.NewReader(b)
		if err := got.Decode(r); err != nil {
			t.Fatalf("call %d (%s): %v", n, proc, err)
		}
		if r.Remaining() != 0 {
			t.Fatalf("call %d (%s): %d bytes left", n, proc, r.Remaining())
		}
		if !reflect.DeepEqual(got, want[n]) {
			t.Errorf("call %d (%s):\n got %+v\nwant %+v", n, proc, got, want[n])
		}
		if e := xdrtest.Encode(got.(xdr.Encoder)); !bytes.Equal(e, b) {
			t.Errorf("call %d (%s) re-encodes to %x", n, proc, e)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Fatalf("%d calls, want %d", n, len(want))
	}
}
