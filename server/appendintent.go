package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"

	"snfs/snfs1"
	"snfs/sunrpc"
)

// An APPEND is not idempotent, and its saved reply (docs/protocol.md section
// 2, "Duplicate request cache") comes after its data is written: a server
// killed between the two would append a retransmission's data a second time.
// So before the write it saves an intent (sunrpc.Call.SaveIntent): the file,
// the offset the data goes to (store.Append reserves it: the size plus the
// APPENDs of the file ahead, which write in that order, so that the intents
// of APPENDs made at once share a commit), and the data's length and
// checksum. When
// the next server starts it resolves each intent no reply followed, before it
// serves anything, by reading the file at that size: the data there means the
// first attempt was applied (the retransmission is answered with that offset
// and writes nothing), anything else that it was not (the retransmission is
// applied). The resolution is saved, so that a further restart, after other
// writes to the file, does not resolve it again from a file that changed.
//
// What this cannot tell apart: a process on the server machine (or an NFS
// WRITE) writing at the end of the file between the size read and the append,
// with the server killed in that same moment; and the first attempt's intent
// and data lost unequally by a crash of the machine (the intent is flushed
// before the data is written, the data after it).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendIntent is an APPEND's intent as saved (encode, decodeAppendIntent).
type appendIntent struct {
	state intentState
	size  uint64 // where the data goes: the file's size before it was written
	count uint32 // the data's length
	sum   uint32 // its CRC-32C
	fh    []byte
}

type intentState byte

const (
	intentPending    intentState = iota // saved before the write; not resolved
	intentApplied                       // resolved: the data is at size
	intentNotApplied                    // resolved: the data is not there; append it
)

const appendIntentVersion = 1

func (it *appendIntent) encode() []byte {
	b := make([]byte, 0, 2+8+4+4+len(it.fh))
	b = append(b, appendIntentVersion, byte(it.state))
	b = binary.BigEndian.AppendUint64(b, it.size)
	b = binary.BigEndian.AppendUint32(b, it.count)
	b = binary.BigEndian.AppendUint32(b, it.sum)
	return append(b, it.fh...)
}

var errBadIntent = errors.New("server: unreadable APPEND intent")

func decodeAppendIntent(b []byte) (*appendIntent, error) {
	if len(b) < 18 || b[0] != appendIntentVersion || b[1] > byte(intentNotApplied) {
		return nil, errBadIntent
	}
	return &appendIntent{state: intentState(b[1]), size: binary.BigEndian.Uint64(b[2:]),
		count: binary.BigEndian.Uint32(b[10:]), sum: binary.BigEndian.Uint32(b[14:]),
		fh: bytes.Clone(b[18:])}, nil
}

// resolveIntent is sunrpc.DRC.Intents' resolve for this server's procedures:
// an APPEND's pending intent becomes applied or not applied; any other
// intent (none is saved) is forgotten.
func (s *Server) resolveIntent(k sunrpc.DRCKey, b []byte) []byte {
	if k.Prog != snfs1.Program || k.Proc != snfs1.ProcAppend {
		return nil
	}
	it, err := decodeAppendIntent(b)
	if err != nil {
		s.log.Warn("an APPEND's saved intent is unreadable: its retransmission is applied again", "xid", k.XID, "client", k.Addr)
		return nil
	}
	if it.state != intentPending {
		return b
	}
	it.state = intentNotApplied
	if s.appendFound(it) {
		it.state = intentApplied
	}
	s.log.Debug("an APPEND in progress at the restart resolved", "xid", k.XID, "client", k.Addr,
		"size", it.size, "count", it.count, "applied", it.state == intentApplied)
	return it.encode()
}

// appendFound reports whether the file holds the intent's data at its size.
func (s *Server) appendFound(it *appendIntent) bool {
	n, err := s.store.Resolve(it.fh)
	if err != nil {
		return false // gone: the retransmission gets the error a new call would
	}
	defer n.Release()
	if err := s.store.OpenIO(n); err != nil {
		return false
	}
	buf := make([]byte, it.count)
	k, _, err := s.store.ReadAt(n, buf, int64(it.size))
	return err == nil && k == len(buf) && crc32.Checksum(buf, castagnoli) == it.sum
}

// saveAppendIntent is store.Append's before for an APPEND on call c.
func saveAppendIntent(c *sunrpc.Call, fh []byte, data []byte) func(off int64) error {
	return func(size int64) error {
		it := appendIntent{state: intentPending, size: uint64(size), count: uint32(len(data)),
			sum: crc32.Checksum(data, castagnoli), fh: fh}
		return c.SaveIntent(it.encode())
	}
}

// appendIntentApplied is APPEND's op.Applied: the earlier attempt's intent was
// resolved as applied.
func appendIntentApplied(intent []byte) bool {
	it, err := decodeAppendIntent(intent)
	return err == nil && it.state == intentApplied
}
