package server

import (
	"encoding/binary"

	"snfs/nfs3"
	"snfs/store"
)

// Scheduling hints for sunrpc.Proc.Inline. They read the raw, unchecked arguments:
// a malformed or forged call only makes them answer false (or true for a call the
// handler then rejects quickly), never touches state.

// leadingFH returns the nfs_fh3 at the start of args and what follows it.
func leadingFH(args []byte) (fh, rest []byte, ok bool) {
	if len(args) < 4 {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(args)
	if n > nfs3.FHSize {
		return nil, nil, false
	}
	end := 4 + int(n+3)&^3
	if end > len(args) {
		return nil, nil, false
	}
	return args[4 : 4+n], args[end:], true
}

// inlineIfAsync: a namespace change (or SETATTR) flushes before replying unless its
// export is async; only then is it quick enough to run inline.
func (s *Server) inlineIfAsync(args []byte) bool {
	fh, _, ok := leadingFH(args)
	if !ok {
		return false
	}
	id, ok := store.HandleExportID(fh)
	if !ok {
		return false
	}
	e := s.byID[id]
	return e != nil && e.async
}

// inlineWrite: an UNSTABLE write only reaches the page cache; stable writes wait for
// their gathered flush.
func inlineWrite(args []byte) bool {
	_, rest, ok := leadingFH(args)
	// offset3 (8 bytes), count3 (4), stable_how (4)
	return ok && len(rest) >= 16 && binary.BigEndian.Uint32(rest[12:]) == uint32(nfs3.Unstable)
}
