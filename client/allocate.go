package client

import (
	"context"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Allocate is SNFS ALLOCATE (docs/protocol.md, "ALLOCATE"): fallocate(2) of
// length bytes at off on the server's file, in mode (reserve, reserve
// keeping the size, or punch a hole), durable when answered. It is sent on
// c's connection with c's credentials, like a WRITE. A status other than OK
// is in the result; a server without the procedure answers PROC_UNAVAIL or
// PROG_UNAVAIL (an *sunrpc error).
func (c *NFS) Allocate(ctx context.Context, fh nfs3.FH, mode snfs1.AllocMode, off, length uint64) (*snfs1.AllocateRes, error) {
	var res snfs1.AllocateRes
	args := &snfs1.AllocateArgs{File: fh, Mode: mode, Offset: off, Length: length}
	if err := c.Program(snfs1.Program, snfs1.Version).Call(ctx, snfs1.ProcAllocate, args, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
