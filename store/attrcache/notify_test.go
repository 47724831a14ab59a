package attrcache

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// fanEvent builds one fanotify event with a FID record, as the kernel lays it out.
func fanEvent(mask uint64, handleType uint32, handle []byte) []byte {
	ne := binary.NativeEndian
	info := make([]byte, infoHeaderLen+fsidLen+fileHandleLen+len(handle))
	info[0] = 1 // FAN_EVENT_INFO_TYPE_FID
	ne.PutUint16(info[2:], uint16(len(info)))
	ne.PutUint32(info[infoHeaderLen+fsidLen:], uint32(len(handle)))
	ne.PutUint32(info[infoHeaderLen+fsidLen+4:], handleType)
	copy(info[infoHeaderLen+fsidLen+fileHandleLen:], handle)
	ev := make([]byte, eventMetaLen, eventMetaLen+len(info))
	ne.PutUint32(ev[0:], uint32(eventMetaLen+len(info)))
	ev[4] = unix.FANOTIFY_METADATA_VERSION
	ne.PutUint16(ev[6:], eventMetaLen)
	ne.PutUint64(ev[8:], mask)
	ne.PutUint32(ev[16:], ^uint32(0)) // FAN_NOFD
	return append(ev, info...)
}

// TestParseEvents: well-formed events report their objects' handles; a queue
// overflow and malformed records make the batch untrustworthy.
func TestParseEvents(t *testing.T) {
	h := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	type handle struct {
		typ uint32
		h   string
	}
	var got []handle
	drop := func(typ uint32, h []byte, _ int32) { got = append(got, handle{typ, string(h)}) }
	b := append(fanEvent(unix.FAN_MODIFY, 0x81, h), fanEvent(unix.FAN_ATTRIB, 0x82, h[:4])...)
	if !parseEvents(b, drop) || len(got) != 2 {
		t.Fatalf("two good events: %d handles", len(got))
	}
	if want := []handle{{0x81, string(h)}, {0x82, string(h[:4])}}; got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("handles %x, want %x", got, want)
	}
	for name, bad := range map[string][]byte{
		"truncated":    b[:len(b)-3],
		"overflow":     fanEvent(unix.FAN_Q_OVERFLOW, 0, nil)[:eventMetaLen],
		"short header": b[:10],
		"handle length": func() []byte {
			e := fanEvent(unix.FAN_MODIFY, 1, h)
			binary.NativeEndian.PutUint32(e[eventMetaLen+infoHeaderLen+fsidLen:], 1<<30)
			return e
		}(),
		"event length": func() []byte { e := fanEvent(unix.FAN_MODIFY, 1, h); binary.NativeEndian.PutUint32(e, 3); return e }(),
	} {
		if name == "overflow" {
			binary.NativeEndian.PutUint32(bad, eventMetaLen)
		}
		if parseEvents(bad, drop) {
			t.Errorf("%s: parsed as trustworthy", name)
		}
	}
}

func FuzzParseEvents(f *testing.F) {
	f.Add(fanEvent(unix.FAN_MODIFY, 0x81, []byte{1, 2, 3, 4, 5, 6, 7, 8}))
	f.Add(append(fanEvent(unix.FAN_CREATE|unix.FAN_ONDIR, 1, []byte{9, 9, 9, 9}), fanEvent(unix.FAN_DELETE_SELF, 1, nil)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		parseEvents(b, func(typ uint32, h []byte, _ int32) {
			if len(h) > len(b) || cap(h) != len(h) {
				t.Fatalf("handle of %d bytes (capacity %d) from %d", len(h), cap(h), len(b))
			}
			n++
		})
		if n > len(b)/(eventMetaLen+infoHeaderLen) {
			t.Fatalf("%d keys from %d bytes", n, len(b))
		}
	})
}
