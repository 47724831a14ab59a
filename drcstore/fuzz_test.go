package drcstore

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"snfs/sunrpc"
)

// FuzzReadRecord: a segment file's bytes are whatever a crash left, so reading
// them never panics, never reads past the buffer, and stops at the first
// damaged record; a record that reads back is the one that was framed.
func FuzzReadRecord(f *testing.F) {
	r := sunrpc.SavedReply{At: time.Unix(1700000000, 5), Key: sunrpc.DRCKey{XID: 7, Prog: 100003, Vers: 3, Proc: 8, Sum: 9, Len: 10, Addr: "127.0.0.1"}, Reply: []byte("reply")}
	f.Add(frame(encode(&r)))
	intent := r
	intent.Intent = true
	f.Add(frame(encode(&intent)))
	f.Add(append(frame(encode(&r)), 0, 0, 0, 3, 1, 2))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		for off := 0; ; {
			rec, next, ok := readRecord(b, off)
			if !ok {
				break
			}
			if next <= off || next > len(b) {
				t.Fatalf("record at %d ends at %d of %d", off, next, len(b))
			}
			back, ok := decode(encode(&rec))
			if !ok || back.Key != rec.Key || !bytes.Equal(back.Reply, rec.Reply) || !back.At.Equal(rec.At) || back.Intent != rec.Intent {
				t.Fatalf("record at %d does not survive encode/decode: %+v vs %+v", off, rec, back)
			}
			off = next
		}
	})
}

// frame is a record as Save writes it: length, CRC-32C, body.
func frame(body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(body, castagnoli))
	return append(b, body...)
}
