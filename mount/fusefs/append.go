package fusefs

import (
	"bytes"
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"snfs/mount/vfs"
)

// O_APPEND writes. Without the write-back cache the kernel sends an append
// at the file's size as the kernel knows it, which another client may have
// moved: the vfs places it (vfs.FS.Append, which says where it went). A
// write is an append when the kernel says so in the WRITE itself (the open
// file's flags, O_APPEND included, as they are at the write: fcntl may have
// changed them), on a handle opened O_APPEND; not a write-back of pages
// (FUSE_WRITE_CACHE), which goes where its pages are. So the decision is made
// here, where the request's flags are, not in the node's Write.
//
// Such an open's I/O is direct (vfs.File.Direct): the kernel put none of the
// data in its page cache. Where the vfs placed it elsewhere than the kernel
// asked, the kernel's pages and attributes of the file go (its size, and
// whatever it cached where the data landed); safe from the handler, as a
// direct write holds no page lock.

// noteAppend records, from inside a node's Open or Create, that the open is
// an O_APPEND open (the call is found as claim finds it).
func (r *ptRaw) noteAppend(ctx context.Context, f *vfs.File) {
	fc, ok := ctx.(*fuse.Context)
	if r == nil || !ok || !f.Append() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.slots[fc.Cancel]; s != nil {
		s.app = f
	}
}

// appendOf is the O_APPEND open a WRITE appends through, or nil.
func (r *ptRaw) appendOf(in *fuse.WriteIn) *vfs.File {
	if in.Flags&syscall.O_APPEND == 0 || in.WriteFlags&fuse.WRITE_CACHE != 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.appends[in.Fh]
}

// Writev is how go-fuse hands on a WRITE first (Write only when the file
// system has no Writev).
func (r *ptRaw) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	f := r.appendOf(in)
	if f == nil {
		return r.writev(cancel, in, data)
	}
	if len(data) == 1 {
		return r.append(cancel, f, in, data[0])
	}
	// One append, one write: the pieces joined.
	return r.append(cancel, f, in, bytes.Join(data, nil))
}

func (r *ptRaw) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if f := r.appendOf(in); f != nil {
		return r.append(cancel, f, in, data)
	}
	return r.writev(cancel, in, [][]byte{data})
}

// append is not abandoned once begun (ctx.go): an APPEND done again lands
// twice. An interrupt before it begins is EINTR.
func (r *ptRaw) append(cancel <-chan struct{}, f *vfs.File, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	select {
	case <-cancel:
		return 0, fuse.EINTR
	default:
	}
	at, k, err := r.ops.Append(r.life, f, data)
	if k > 0 && at != in.Offset {
		r.srv.InodeNotify(in.NodeId, 0, 0)
	}
	if err != nil && k == 0 {
		return 0, fuse.ToStatus(errnoOf(err))
	}
	// A writer without CAP_FSETID clears the set-ID bits, as node.Write
	// has it done for other writes (passthrough.go).
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0 {
		if err := r.v.ClearSetID(r.life, f); err != nil {
			return 0, fuse.ToStatus(errnoOf(err))
		}
	}
	return uint32(k), fuse.OK
}
