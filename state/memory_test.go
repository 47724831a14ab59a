package state

import (
	"runtime"
	"testing"
)

// entryBytes fills a machine with n entries and returns the growth of the live
// heap per entry. Each entry is a file open by one client, with a 24-byte
// handle (the size of this server's handles for ext4 files); holders > 1 adds
// readers from other clients to every file.
func entryBytes(tb testing.TB, n, holders int) float64 {
	handle := make([]byte, 24)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m := New(Config{MaxEntries: 2 * n}, t0)
	m.VersionsReserved(t0, 1<<40, nil)
	for c := ClientID(1); c <= 1000; c++ {
		m.Register(t0, c)
		m.CallbackPathVerified(t0, c, true)
	}
	for i := range n {
		for k := range holders {
			r, _ := m.Open(t0, ReqID(i), OpenArgs{File: fid(i), Handle: handle, Client: ClientID((i+k)%1000 + 1), Mode: Read})
			if r.Verdict != Proceed {
				tb.Fatalf("open %d: %v", i, r.Verdict)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if st := m.Stats(t0); st.Entries != n {
		tb.Fatalf("%d entries, want %d", st.Entries, n)
	}
	runtime.KeepAlive(m)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// TestEntryMemory holds the table to the bound: at most 300 bytes of
// server memory per entry at 1,000,000 entries.
func TestEntryMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a table of 1,000,000 entries")
	}
	if b := entryBytes(t, 1_000_000, 1); b > 300 {
		t.Fatalf("%.0f bytes per entry at 1,000,000 entries, bound 300", b)
	}
}

// BenchmarkEntryMemory reports bytes per entry (bytes/entry) at 1,000,000
// entries, with one and with three clients per file.
func BenchmarkEntryMemory(b *testing.B) {
	for _, holders := range []int{1, 3} {
		b.Run(map[int]string{1: "one-client", 3: "three-clients"}[holders], func(b *testing.B) {
			var bytes float64
			for range b.N {
				bytes = entryBytes(b, 1_000_000, holders)
			}
			b.ReportMetric(bytes, "bytes/entry")
		})
	}
}

// BenchmarkOpenClose is the cost of one OPEN and CLOSE pair on a table of
// 100,000 files.
func BenchmarkOpenClose(b *testing.B) {
	m := New(Config{}, t0)
	m.VersionsReserved(t0, 1<<40, nil)
	m.Register(t0, 1)
	m.CallbackPathVerified(t0, 1, true)
	handle := make([]byte, 24)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		f := fid(i % 100_000)
		m.Open(t0, ReqID(i), OpenArgs{File: f, Handle: handle, Client: 1, Mode: Read})
		m.Close(t0, CloseArgs{File: f, Client: 1, Mode: Read})
	}
}

// BenchmarkPlainRead is the cost a plain NFS READ pays for coexistence: the
// access check on a file it already holds.
func BenchmarkPlainRead(b *testing.B) {
	m := New(Config{}, t0)
	handle := make([]byte, 24)
	for i := range 1000 {
		m.PlainAccess(t0, 0, AccessArgs{File: fid(i), Handle: handle, Client: 100, Kind: AccessRead})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m.PlainAccess(t0, ReqID(i), AccessArgs{File: fid(i % 1000), Handle: handle, Client: 100, Kind: AccessRead})
	}
}
