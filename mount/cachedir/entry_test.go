package cachedir

import (
	"bytes"
	"reflect"
	"testing"
)

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []entry{
		{},
		{version: 7, size: 100, gen: 3, lastUse: 12345, valid: rs(0, 10, 20, 80), dirty: rs(5, 5, 50, 10)},
		{version: 1 << 63, size: maxOffset, truncated: true, truncTo: 4, valid: rs(0, maxOffset)},
		{version: 3, size: 10, valid: rs(0, 10), dirty: rs(0, 10), hasBase: true,
			base: Base{Size: 7, CtimeSec: 1, CtimeNsec: 2, MtimeSec: 3, MtimeNsec: 4}, parent: []byte{1, 2, 3}, name: "f"},
		{size: 1, name: "only-a-name"},
		{size: 4, valid: rs(0, 4), dirty: rs(0, 4), hasWriter: true, writer: Writer{UID: 1000, GID: 100}},
		{size: 4, valid: rs(0, 4), dirty: rs(0, 4), hasBase: true, base: Base{Size: 4}, parent: []byte{9}, name: "w",
			hasWriter: true, writer: Writer{UID: 65533, GID: 65533, Groups: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}},
		{size: 4, valid: rs(0, 4), dirty: rs(0, 4), removing: true},
		{size: 4, valid: rs(0, 4), dirty: rs(0, 4), hasBase: true, base: Base{Size: 4}, parent: []byte{9}, name: "w",
			hasWriter: true, writer: Writer{UID: 1}, removing: true},
	} {
		got, err := decodeEntry(e.encode())
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", e, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip: got %+v, want %+v", got, e)
		}
	}
	bad := entry{size: 10, valid: rs(0, 4), dirty: rs(3, 2)}
	if _, err := decodeEntry(bad.encode()); err == nil {
		t.Error("dirty outside valid accepted")
	}
	bad = entry{size: 3, valid: rs(0, 4)}
	if _, err := decodeEntry(bad.encode()); err == nil {
		t.Error("range past size accepted")
	}
	bad = entry{size: 1, hasWriter: true, writer: Writer{Groups: make([]uint32, MaxWriterGroups+1)}}
	if _, err := decodeEntry(bad.encode()); err == nil {
		t.Error("a writer with 17 groups accepted")
	}
	b := (&entry{size: 1, hasWriter: true, writer: Writer{UID: 1}}).encode()
	b[0] = entryFormat
	if _, err := decodeEntry(b[:len(b)-12-4-4]); err == nil {
		t.Error("format 1 with a writer flag accepted")
	}
}

// FuzzDecodeEntry: the decoder never panics, accepts only entries that keep
// the invariants, and what it accepts encodes back to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	f.Add((&entry{}).encode())
	f.Add((&entry{version: 7, size: 100, gen: 3, valid: rs(0, 10, 20, 80), dirty: rs(5, 5)}).encode())
	f.Add((&entry{size: 9, truncated: true, truncTo: 2, valid: rs(1, 1, 3, 1, 5, 1)}).encode())
	f.Add((&entry{size: 2, hasBase: true, base: Base{Size: 2, CtimeSec: 9}, parent: []byte{7}, name: "x"}).encode())
	f.Add((&entry{size: 2, hasWriter: true, writer: Writer{UID: 5, GID: 6, Groups: []uint32{7}}, name: "w"}).encode())
	f.Add((&entry{size: 2, valid: rs(0, 2), dirty: rs(0, 2), removing: true}).encode())
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			return
		}
		if !e.valid.normal(e.size) || !e.dirty.normal(e.size) || !e.dirty.subsetOf(e.valid) {
			t.Fatalf("accepted entry breaks invariants: %+v", e)
		}
		if again := e.encode(); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b, again)
		}
	})
}
