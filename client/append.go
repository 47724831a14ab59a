package client

import (
	"context"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Append is SNFS APPEND (docs/protocol.md, "APPEND"): data written at the
// server's end of file, as one write no other write of the file overlaps; the
// result says where it went. It is sent on c's connection with c's
// credentials, like a WRITE. A status other than OK is in the result, as for
// the NFSv3 calls; a server without the procedure answers PROG_UNAVAIL or
// PROC_UNAVAIL (an *sunrpc error).
func (c *NFS) Append(ctx context.Context, fh nfs3.FH, data []byte, stable nfs3.StableHow) (*snfs1.AppendRes, error) {
	var res snfs1.AppendRes
	if err := c.Program(snfs1.Program, snfs1.Version).Call(ctx, snfs1.ProcAppend, &snfs1.AppendArgs{File: fh, Stable: stable, Data: data}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
