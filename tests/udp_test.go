package tests

import (
	"bytes"
	"os"
	"testing"

	"snfs/client"
	"snfs/nfs3"
)

// TestUDPLargeRequests: over UDP a READ or READDIR asking for more than a datagram
// holds gets a short reply (not silence), and the client can continue.
func TestUDPLargeRequests(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	os.WriteFile(e.path("big"), data, 0o644)
	os.Mkdir(e.path("d"), 0o755)
	for i := 0; i < 3000; i++ {
		os.WriteFile(e.path("d/"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676))), nil, 0o644)
	}
	u, err := client.DialNFS(ctx, "udp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	fh := e.lookup(e.root, "big")
	var got []byte
	for off := 0; off < len(data); {
		rd, err := u.Read(ctx, fh, uint64(off), 1<<20)
		ok(t, "READ over UDP", rd.Status, err)
		if len(rd.Data) == 0 {
			t.Fatal("empty READ before eof")
		}
		got = append(got, rd.Data...)
		off += len(rd.Data)
		if rd.EOF {
			break
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes over UDP, content differs", len(got))
	}
	ents, err := u.ReadDirAll(ctx, e.lookup(e.root, "d"), true)
	if err != nil || len(ents) != 3002 {
		t.Fatalf("READDIRPLUS over UDP: %d entries, %v", len(ents), err)
	}
	res, err := u.Readdirplus(ctx, &nfs3.ReaddirplusArgs{Dir: e.lookup(e.root, "d"), DirCount: 1 << 20, MaxCount: 1 << 20})
	ok(t, "READDIRPLUS asking for 1 MiB over UDP", res.Status, err)
	if res.EOF {
		t.Fatal("a 3,000-entry READDIRPLUS fit in one datagram?")
	}
}
