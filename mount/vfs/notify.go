package vfs

// Notifier drops the kernel's caches of an inode (package fusefs implements
// it with go-fuse's notifications). The core uses it when a lock grant or a
// lost lock makes the kernel's pages of a file stale; the snfs cache manager
// when a callback does.
type Notifier interface {
	// InvalidateData drops the kernel's cached pages and attributes of i.
	InvalidateData(i *Inode)
	// InvalidateAttr drops the kernel's cached attributes of i.
	InvalidateAttr(i *Inode)
}

// NamesInvalidator is a Notifier that can also drop every name (dentry)
// the kernel keeps at once, without any directory's lock (fusefs: the
// connection's epoch). Only a mount whose Notifier is one may let the
// kernel keep names it must later take back (Ops.EntryTTLLocked above 0
// for a directory whose names another party may change).
type NamesInvalidator interface {
	// InvalidateNames drops them; false if it failed.
	InvalidateNames() bool
	// CanInvalidateNames reports whether InvalidateNames works here.
	CanInvalidateNames() bool
}

// SetNotifier sets how the kernel's caches are invalidated (once mounted).
func (fs *FS) SetNotifier(n Notifier) { fs.notify.Store(&n) }

func (fs *FS) NotifyData(i *Inode) {
	if n := fs.notify.Load(); n != nil {
		(*n).InvalidateData(i)
	}
}

func (fs *FS) NotifyAttr(i *Inode) {
	if n := fs.notify.Load(); n != nil {
		(*n).InvalidateAttr(i)
	}
}

// NotifyNames drops every name the kernel keeps (NamesInvalidator); false
// if it cannot.
func (fs *FS) NotifyNames() bool {
	if n := fs.notify.Load(); n != nil {
		if ni, ok := (*n).(NamesInvalidator); ok {
			return ni.InvalidateNames()
		}
	}
	return false
}

// CanNotifyNames reports whether NotifyNames works (once mounted).
func (fs *FS) CanNotifyNames() bool {
	if n := fs.notify.Load(); n != nil {
		if ni, ok := (*n).(NamesInvalidator); ok {
			return ni.CanInvalidateNames()
		}
	}
	return false
}

// SetNode records the bridge's node of i (for Notifier).
func (i *Inode) SetNode(n any) {
	i.Mu.Lock()
	i.node = n
	i.Mu.Unlock()
}

// Node is what SetNode recorded.
func (i *Inode) Node() any {
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return i.node
}
