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
