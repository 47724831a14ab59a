package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// Extended attributes (docs/mount.md, "Extended attributes"): snfs mode only,
// through the protocol's GETXATTR, SETXATTR, LISTXATTRS and REMOVEXATTR
// (docs/protocol.md), user namespace only; nfs mode has none (NFSv3 has no
// such procedures: ErrNotSupported). While the server lets this client cache
// a regular file, its attributes are cached with its data: a change by anyone
// else calls this client back first (or, a local process's, at once), and
// the callback that stops caching, or a new OPEN's version, ends them.

// ErrNoXattr is what a missing extended attribute gives: snfs1.ErrNoXattr.
var ErrNoXattr = snfs1.ErrNoXattr

// xattrCache is a cached file's extended attributes, valid while the file is
// cached under the version and callback count it was filled at.
type xattrCache struct {
	version uint64
	invals  uint64
	values  map[string][]byte // nil value: the attribute is known absent
	names   []string          // the list; valid when listed
	listed  bool
}

// xattrKey is what makes a cache valid: the file cached, at a version, with
// no invalidating callback since; ok is false when it is not cached.
func xattrKeyLocked(i *vfs.Inode) (version, invals uint64, ok bool) {
	if i.Type != nfs3.TypeReg || !stOf(i).Caching() || snOf(i).cf == nil || stOf(i).Held() == 0 {
		return 0, 0, false
	}
	return stOf(i).Version(), stOf(i).Invals(), true
}

// xattrsLocked returns i's cache if it is valid, making an empty one when the
// file is cached and the old one is not; nil when the file is not cached.
func xattrsLocked(i *vfs.Inode) *xattrCache {
	v, n, ok := xattrKeyLocked(i)
	if !ok {
		snOf(i).xattrs = nil
		return nil
	}
	if c := snOf(i).xattrs; c != nil && c.version == v && c.invals == n {
		return c
	}
	snOf(i).xattrs = &xattrCache{version: v, invals: n, values: map[string][]byte{}}
	return snOf(i).xattrs
}

// xattrTag is what a call's answer may be cached under: the cache's key and
// the count of this client's own changes begun (xattrGen) when it was sent.
type xattrTag struct {
	version, invals, gen uint64
	ok                   bool // the file was cached
}

func xattrTagLocked(i *vfs.Inode) xattrTag {
	v, n, ok := xattrKeyLocked(i)
	return xattrTag{v, n, snOf(i).xattrGen, ok}
}

// xattrFill runs fill on i's cache if it is still the one valid at t
// (nothing took caching away while the call was out) and no change of this
// client began meanwhile (its answer may have been applied after the call's,
// or not yet).
func xattrFill(i *vfs.Inode, t xattrTag, fill func(c *xattrCache)) {
	if !t.ok {
		return
	}
	i.Mu.Lock()
	defer i.Mu.Unlock()
	if snOf(i).xattrGen != t.gen {
		return
	}
	if c := xattrsLocked(i); c != nil && c.version == t.version && c.invals == t.invals {
		fill(c)
	}
}

// checkXattr: only the user namespace goes to the server.
func (sn *snfsFS) checkXattr(name string) error {
	if !strings.HasPrefix(name, snfs1.XattrPrefix) {
		return vfs.ErrNotSupported
	}
	return nil
}

// getXattr is GetXattr in snfs mode.
func (fs *snfsFS) getXattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, name string) ([]byte, error) {
	if err := fs.checkXattr(name); err != nil {
		return nil, err
	}
	if isProvFH(i.FH) {
		return nil, ErrNoXattr // made locally, none set: permitsetattr.go
	}
	i.Mu.Lock()
	xc := xattrsLocked(i)
	if xc != nil {
		if v, ok := xc.values[name]; ok {
			i.Mu.Unlock()
			fs.stats.XattrHits.Add(1)
			if v == nil {
				return nil, ErrNoXattr
			}
			return v, nil
		}
	}
	tag := xattrTagLocked(i)
	i.Mu.Unlock()
	res, err := vfs.RPC(ctx, fs.FS, func() (*snfs1.GetXattrRes, error) { return fs.Client(c).GetXattr(ctx, i.FH, name) })
	if err != nil && !errors.Is(err, ErrNoXattr) {
		return nil, xattrErr("GETXATTR", err)
	}
	fs.xattrAnswered.run(i)
	// Only what any reader would get is cached: a refusal (EACCES) is
	// the caller's own.
	if err == nil || errors.Is(err, ErrNoXattr) {
		val := res.Value
		if err == nil && val == nil {
			val = []byte{}
		}
		xattrFill(i, tag, func(xc *xattrCache) { xc.values[name] = val })
	}
	if err != nil {
		return nil, err
	}
	return res.Value, nil
}

// listXattrs is ListXattrs in snfs mode.
func (fs *snfsFS) listXattrs(ctx context.Context, i *vfs.Inode, c vfs.Cred) ([]string, error) {
	if isProvFH(i.FH) {
		return nil, nil // made locally, none set: permitsetattr.go
	}
	i.Mu.Lock()
	if xc := xattrsLocked(i); xc != nil && xc.listed {
		names := xc.names
		i.Mu.Unlock()
		fs.stats.XattrHits.Add(1)
		return names, nil
	}
	tag := xattrTagLocked(i)
	i.Mu.Unlock()
	var names []string
	cookie := uint64(0)
	for {
		res, err := vfs.RPC(ctx, fs.FS, func() (*snfs1.ListXattrsRes, error) {
			return fs.Client(c).ListXattrs(ctx, i.FH, cookie, snfs1.XattrListMax)
		})
		if errors.Is(err, nfs3.ErrBadCookie) && cookie != 0 {
			// The names changed between two replies: from the start.
			names, cookie = nil, 0
			continue
		}
		if err != nil {
			return nil, xattrErr("LISTXATTRS", err)
		}
		names = append(names, res.Names...)
		if res.EOF || len(res.Names) == 0 {
			break
		}
		cookie = res.Cookie
	}
	xattrFill(i, tag, func(xc *xattrCache) { xc.names, xc.listed = names, true })
	return names, nil
}

// setXattr is SetXattr in snfs mode.
func (sn *snfsFS) setXattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, name string, value []byte, flags uint32) error {
	fs := sn.FS
	if err := sn.checkXattr(name); err != nil {
		return err
	}
	opt := snfs1.XattrEither
	switch {
	case flags&vfs.XattrCreate != 0:
		opt = snfs1.XattrCreate
	case flags&vfs.XattrReplace != 0:
		opt = snfs1.XattrReplace
	}
	return sn.changeXattr(ctx, i, name, "SETXATTR", func() (*snfs1.XattrChangeRes, error) {
		return fs.Client(c).SetXattr(ctx, i.FH, name, value, opt)
	}, append([]byte{}, value...))
}

// removeXattr is RemoveXattr in snfs mode.
func (sn *snfsFS) removeXattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, name string) error {
	fs := sn.FS
	if err := sn.checkXattr(name); err != nil {
		return err
	}
	return sn.changeXattr(ctx, i, name, "REMOVEXATTR", func() (*snfs1.XattrChangeRes, error) {
		return fs.Client(c).RemoveXattr(ctx, i.FH, name)
	}, nil)
}

// changeXattr sends a change and applies its answer: the file's attributes
// (its ctime moved: this client's own change, chained by the wcc_data), and
// the cache, which now knows name's value (after, nil: absent); the list is
// asked for again.
func (sn *snfsFS) changeXattr(ctx context.Context, i *vfs.Inode, name, proc string, call func() (*snfs1.XattrChangeRes, error), after []byte) error {
	fs := sn.FS
	i.Mu.Lock()
	if xc := snOf(i).xattrs; xc != nil {
		// Whatever the answer, the cached value and list may be wrong now.
		delete(xc.values, name)
		xc.listed = false
	}
	// Answers to calls sent before this change are not cached (xattrFill).
	snOf(i).xattrGen++
	tag := xattrTagLocked(i)
	i.Mu.Unlock()
	res, err := vfs.RPC(ctx, fs, call)
	if err != nil {
		i.Mu.Lock()
		snOf(i).xattrGen++
		i.Mu.Unlock()
		return xattrErr(proc, err)
	}
	sn.snfsOwnChange(i, &res.Wcc)
	i.Mu.Lock()
	i.WccLocked(&res.Wcc, time.Now())
	i.Mu.Unlock()
	// Only if no other change began meanwhile: the server may have applied
	// them in either order.
	xattrFill(i, tag, func(xc *xattrCache) { xc.values[name] = after })
	i.Mu.Lock()
	snOf(i).xattrGen++
	i.Mu.Unlock()
	return nil
}

// xattrErr wraps a call's error; a server without the procedures (an older
// snfs) has no extended attributes: ErrNotSupported.
func xattrErr(proc string, err error) error {
	var rerr *sunrpc.RPCError
	if errors.As(err, &rerr) && (rerr.Accept == sunrpc.ProcUnavail || rerr.Accept == sunrpc.ProgUnavail) {
		return fmt.Errorf("%s: %w (%w)", proc, vfs.ErrNotSupported, err)
	}
	return fmt.Errorf("%s: %w", proc, err)
}
