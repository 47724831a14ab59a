package server

import (
	"snfs/nfs3"
	"snfs/store"
)

// Scheduling hints for sunrpc.Proc.Inline. They read the raw, unchecked arguments
// through nfs3's peeks (which agree with its decoders): a malformed or forged call
// only makes them answer false (or true for a call the handler then rejects
// quickly), never touches state.

// inlineIfAsync: a namespace change (or SETATTR) flushes before replying unless its
// export is async; only then is it quick enough to run inline.
func (s *Server) inlineIfAsync(args []byte) bool {
	fh, ok := nfs3.PeekFH(args)
	if !ok {
		return false
	}
	id, ok := store.HandleExportID(fh)
	if !ok {
		return false
	}
	e := s.table().byID[id]
	return e != nil && e.config().async
}

// inlineWrite: an UNSTABLE write only reaches the page cache; stable writes wait for
// their gathered flush.
func inlineWrite(args []byte) bool {
	head, ok := nfs3.PeekWrite(args)
	return ok && head.Stable == nfs3.Unstable
}
