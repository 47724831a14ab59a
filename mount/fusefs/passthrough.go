package fusefs

import (
	"context"
	"log"
	"os"
	"sync"

	"snfs/mount/cachemgr"
	"snfs/mount/vfs"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// FUSE passthrough (package vfs decides which opens pass through; see its
// passthrough.go). The backing files are registered here rather than by
// go-fuse (fs.FilePassthroughFder): go-fuse v2.12.1 counts a node's backing
// references per open but drops one at every release of the node, including
// releases of opens that did not pass through, so a release racing the
// first passthrough open of the node (a file written, closed and at once
// opened for reading: the kernel sends the RELEASE asynchronously) closes the
// new backing id before the kernel has used it, and that open fails with EIO.
// ptRaw wraps go-fuse's raw file system: an Open whose vfs open passes
// through gets the node's backing id (registered at the node's first such
// open, unregistered at its last release), counted per passthrough open only.
type ptRaw struct {
	fuse.RawFileSystem
	srv  *fuse.Server // set before serving
	v    *vfs.FS
	ops  vfs.Ops           // the bridge's (appends, append.go)
	sn   cachemgr.SNFSMode // the bridge's: the passthrough descriptors (nil in nfs mode: no open is claimed)
	life context.Context   // the mount's: appends are served with it (append.go)

	mu      sync.Mutex
	slots   map[<-chan struct{}]*ptSlot  // opens in progress, by their call's key
	backing map[uint64]*backingRef       // by node id
	open    map[uint64]uint64            // passthrough opens' file handles: their node id
	appends map[uint64]*vfs.File         // O_APPEND opens' file handles: their vfs open (append.go)
	kill    map[<-chan struct{}]struct{} // writes flagged FUSE_WRITE_KILL_SUIDGID, by their call's key
	// FLUSHes and flock RELEASEs, by their call's key: the lock owner whose
	// locks go (lock.go)
	lockCalls map[<-chan struct{}]lockCall
}

// ptSlot carries an open from the node's Open to ptRaw.Open: f if it passes
// through, app if it is an O_APPEND open.
type ptSlot struct{ f, app *vfs.File }

type backingRef struct {
	id   int32
	refs int
}

func newPtRaw(raw fuse.RawFileSystem, v *vfs.FS, ops vfs.Ops, sn cachemgr.SNFSMode, life context.Context) *ptRaw {
	return &ptRaw{RawFileSystem: raw, v: v, ops: ops, sn: sn, life: life, slots: map[<-chan struct{}]*ptSlot{},
		backing: map[uint64]*backingRef{}, open: map[uint64]uint64{}, appends: map[uint64]*vfs.File{},
		kill: map[<-chan struct{}]struct{}{}, lockCalls: map[<-chan struct{}]lockCall{}}
}

// claim records, from inside a node's Open, that the open passes through.
// The call is found by ctx's Cancel channel, which ptRaw.Open made for it.
func (r *ptRaw) claim(ctx context.Context, f *vfs.File) bool {
	fc, ok := ctx.(*fuse.Context)
	if r == nil || !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.slots[fc.Cancel]
	if s == nil {
		return false
	}
	s.f = f
	return true
}

func (r *ptRaw) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return r.passThrough(in.Flags, func(key chan struct{}) fuse.Status { return r.RawFileSystem.Open(key, in, out) },
		func() uint64 { return in.NodeId }, out)
}

func (r *ptRaw) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return r.passThrough(in.Flags, func(key chan struct{}) fuse.Status { return r.RawFileSystem.Create(key, in, name, out) },
		func() uint64 { return out.NodeId }, &out.OpenOut)
}

// passThrough runs an Open or a Create (call) with a fresh key and, if its
// vfs open passes through, gives the open the node's backing id. nodeID is
// the opened node's (known after the call for a Create).
func (r *ptRaw) passThrough(flags uint32, call func(key chan struct{}) fuse.Status, nodeID func() uint64, out *fuse.OpenOut) fuse.Status {
	// The node's Open is served with the mount's context, never this call's
	// cancellation (fusefs.go): a fresh channel is only the call's key.
	key := make(chan struct{})
	s := &ptSlot{}
	r.mu.Lock()
	r.slots[key] = s
	r.mu.Unlock()
	st := call(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.slots, key)
	if !st.Ok() {
		return st
	}
	if s.app != nil && s.f == nil {
		r.appends[out.Fh] = s.app
	}
	if s.f == nil {
		return st
	}
	nid := nodeID()
	b := r.backing[nid]
	if b == nil {
		id, errno := r.srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(r.sn.PassthroughFile(s.f).Fd())})
		if errno != 0 {
			// The vfs open exists and the kernel will not release it: undo.
			r.mu.Unlock()
			r.RawFileSystem.Release(key, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: nid}, Fh: out.Fh, Flags: flags})
			r.mu.Lock()
			return fuse.ToStatus(errno)
		}
		b = &backingRef{id: id}
		r.backing[nid] = b
	}
	b.refs++
	r.open[out.Fh] = nid
	out.BackingID = b.id
	out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
	out.OpenFlags &^= fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_DIRECT_IO
	return st
}

// writev hands on a WRITE that is not an append (Writev, append.go). It marks
// a write the kernel flags FUSE_WRITE_KILL_SUIDGID (a writer without
// CAP_FSETID, HANDLE_KILLPRIV_V2) for the node's Write to find (killsSetID),
// by a fresh cancel channel as Open's key.
func (r *ptRaw) writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID == 0 {
		return r.RawFileSystem.Writev(cancel, in, data)
	}
	key := make(chan struct{})
	r.mu.Lock()
	r.kill[key] = struct{}{}
	r.mu.Unlock()
	// The key is also the write's cancel channel: closed on the kernel's
	// interrupt, as go-fuse would close the request's (ctx.go).
	done := make(chan struct{})
	defer close(done)
	go func() { // ends with the write (done)
		select {
		case <-cancel:
			close(key)
		case <-done:
		}
	}()
	n, st := r.RawFileSystem.Writev(key, in, data)
	r.mu.Lock()
	delete(r.kill, key)
	r.mu.Unlock()
	return n, st
}

// killsSetID reports, from inside a node's Write, whether the kernel flagged
// the write as one that clears the file's set-ID bits.
func (r *ptRaw) killsSetID(ctx context.Context) bool {
	fc, ok := ctx.(*fuse.Context)
	if r == nil || !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, kill := r.kill[fc.Cancel]
	return kill
}

func (r *ptRaw) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	// Before go-fuse's release, which frees the handle number for reuse.
	r.mu.Lock()
	delete(r.appends, in.Fh)
	if nid, ok := r.open[in.Fh]; ok {
		delete(r.open, in.Fh)
		if b := r.backing[nid]; b != nil {
			b.refs--
			if b.refs == 0 {
				delete(r.backing, nid)
				if errno := r.srv.UnregisterBackingFd(b.id); errno != 0 {
					log.Printf("fuse: closing passthrough backing id %d: %v", b.id, errno)
				}
			}
		}
	}
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		// The last close of an open file description with flock locks:
		// they go (lock.go).
		key := make(chan struct{})
		r.lockCalls[key] = lockCall{in.LockOwner}
		defer func() {
			r.mu.Lock()
			delete(r.lockCalls, key)
			r.mu.Unlock()
		}()
		cancel = key
	}
	r.mu.Unlock()
	r.RawFileSystem.Release(cancel, in)
}

// passthroughFile is the descriptor the kernel does f's I/O on (FUSE
// passthrough), or nil: always nil in nfs mode (sn nil).
func passthroughFile(sn cachemgr.SNFSMode, f *vfs.File) *os.File {
	if sn == nil {
		return nil
	}
	return sn.PassthroughFile(f)
}
