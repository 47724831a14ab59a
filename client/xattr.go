package client

import (
	"context"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// The extended-attribute procedures (docs/protocol.md, "GETXATTR" to
// "REMOVEXATTR"), sent on c's connection with c's credentials like the NFSv3
// calls. A status other than OK is in the result; a server without them
// answers PROC_UNAVAIL (an *sunrpc error). A value larger than
// snfs1.XattrSizeMax is not sent: the result is SNFS_ERR_XATTR2BIG, as the
// server would answer.

// GetXattr is GETXATTR: the value of fh's attribute name.
func (c *NFS) GetXattr(ctx context.Context, fh nfs3.FH, name string) (*snfs1.GetXattrRes, error) {
	var res snfs1.GetXattrRes
	if err := c.snfs().Call(ctx, snfs1.ProcGetXattr, &snfs1.GetXattrArgs{File: fh, Name: name}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// SetXattr is SETXATTR: set fh's attribute name to value.
func (c *NFS) SetXattr(ctx context.Context, fh nfs3.FH, name string, value []byte, opt snfs1.SetXattrOption) (*snfs1.SetXattrRes, error) {
	if len(value) > snfs1.XattrSizeMax {
		return &snfs1.SetXattrRes{Status: snfs1.ErrXattr2Big}, nil
	}
	var res snfs1.SetXattrRes
	if err := c.snfs().Call(ctx, snfs1.ProcSetXattr, &snfs1.SetXattrArgs{File: fh, Option: opt, Name: name, Value: value}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ListXattrs is LISTXATTRS: names of fh's attributes from cookie on, in at
// most maxCount bytes.
func (c *NFS) ListXattrs(ctx context.Context, fh nfs3.FH, cookie uint64, maxCount uint32) (*snfs1.ListXattrsRes, error) {
	var res snfs1.ListXattrsRes
	if err := c.snfs().Call(ctx, snfs1.ProcListXattrs, &snfs1.ListXattrsArgs{File: fh, Cookie: cookie, MaxCount: maxCount}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// RemoveXattr is REMOVEXATTR: remove fh's attribute name.
func (c *NFS) RemoveXattr(ctx context.Context, fh nfs3.FH, name string) (*snfs1.RemoveXattrRes, error) {
	var res snfs1.RemoveXattrRes
	if err := c.snfs().Call(ctx, snfs1.ProcRemoveXattr, &snfs1.RemoveXattrArgs{File: fh, Name: name}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// snfs is c's connection and credentials, for the snfs program.
func (c *NFS) snfs() *sunrpc.Client { return c.Program(snfs1.Program, snfs1.Version) }
