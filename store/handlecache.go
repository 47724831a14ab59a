package store

import (
	"container/list"
	"sync"

	"golang.org/x/sys/unix"
)

// handleCache remembers the NFS handles of directory entries, so that LOOKUP and
// READDIRPLUS ask the kernel once per entry (fstatat, for fresh attributes) instead of twice
// (fstatat and name_to_handle_at), and compute no MAC for a known entry. A directory's entries are dropped as soon as its
// ctime differs from the one they were learned under (any entry added, removed or
// renamed changes it), and each hit must also match the inode number fstatat just
// returned, so a name never yields the handle of an object it no longer names.
// Bounded in entries; whole directories are evicted least recently used first.
type handleCache struct {
	max int

	mu    sync.Mutex
	dirs  map[string]*dirHandles // by the directory's kernel key; guarded by mu
	lru   *list.List             // of *dirHandles, front = most recent; guarded by mu
	total int                    // entries across dirs; guarded by mu
}

type dirHandles struct {
	key   string
	ctime unix.Timespec
	names map[string]nameHandle
	elem  *list.Element
}

type nameHandle struct {
	ino    uint64
	export uint32 // the export the handle was made for (a directory may be in two)
	fh     []byte // the entry's NFS handle, MAC included; never modified
}

func newHandleCache(max int) *handleCache {
	return &handleCache{max: max, dirs: map[string]*dirHandles{}, lru: list.New()}
}

// get returns the handle of dir/name in export if it is known for this directory
// state and inode.
func (c *handleCache) get(export uint32, dir string, ctime unix.Timespec, name string, ino uint64) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dirs[dir]
	if d == nil || d.ctime != ctime {
		return nil, false
	}
	h, ok := d.names[name]
	if !ok || h.ino != ino || h.export != export {
		return nil, false
	}
	if c.lru.Front() != d.elem {
		c.lru.MoveToFront(d.elem)
	}
	return h.fh[:len(h.fh):len(h.fh)], true
}

// put records dir/name's handle in export under the directory state ctime.
func (c *handleCache) put(export uint32, dir string, ctime unix.Timespec, name string, ino uint64, fh []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dirs[dir]
	if d != nil && d.ctime != ctime {
		c.drop(d)
		d = nil
	}
	if d == nil {
		d = &dirHandles{key: dir, ctime: ctime, names: map[string]nameHandle{}}
		d.elem = c.lru.PushFront(d)
		c.dirs[dir] = d
	}
	if _, ok := d.names[name]; !ok {
		c.total++
	}
	d.names[name] = nameHandle{ino: ino, export: export, fh: fh}
	for c.total > c.max && c.lru.Len() > 1 {
		c.drop(c.lru.Back().Value.(*dirHandles))
	}
}

// forgetDir forgets the entries of the directory with kernel key dir: its
// entries changed. (The ctime check alone misses an inode number reused within
// one timestamp tick: same name, same ino, same ctime, a new generation.)
func (c *handleCache) forgetDir(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.dirs[dir]; d != nil {
		c.drop(d)
	}
}

// clear forgets everything.
func (c *handleCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirs, c.total = map[string]*dirHandles{}, 0
	c.lru.Init()
}

// drop forgets a directory. Called with mu held.
func (c *handleCache) drop(d *dirHandles) {
	c.total -= len(d.names)
	c.lru.Remove(d.elem)
	delete(c.dirs, d.key)
}
