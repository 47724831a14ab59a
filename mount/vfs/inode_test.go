package vfs

import (
	"testing"
	"time"

	"snfs/nfs3"
)

// A non-modifying call's attributes are dropped when a reply to a modifying
// call of this client came after the call began: found by the fsx tester on a
// mount (tests/mount_fsx_test.go, seed 29 under -race), where the kernel's
// readahead READ, sent before an ftruncate's SETATTR and answered after it, put
// the old size back and the next fstat reported it.
func TestStalePostOpAttributesDropped(t *testing.T) {
	fs := &FS{cfg: Config{AcRegMin: 3 * time.Second, AcRegMax: 60 * time.Second}}
	fs.ops = nfsOps{fs}
	now := time.Now()
	i := &Inode{fs: fs, Type: nfs3.TypeReg}
	old := nfs3.Fattr{Type: nfs3.TypeReg, Size: 0x33a78, Mtime: nfs3.Time{Sec: 10}, Ctime: nfs3.Time{Sec: 10}}
	i.postOpLocked(&old, fs.attrStart(), now)

	readStart := fs.attrStart() // a READ is sent
	truncated := old
	truncated.Size, truncated.Mtime, truncated.Ctime = 0x3f3ac, nfs3.Time{Sec: 11}, nfs3.Time{Sec: 11}
	i.wccLocked(&nfs3.WccData{Before: &nfs3.WccAttr{Size: old.Size, Mtime: old.Mtime, Ctime: old.Ctime},
		After: &truncated}, now) // the SETATTR's reply
	i.postOpLocked(&old, readStart, now) // the READ's reply, with the attributes before the SETATTR
	if i.attr.Size != truncated.Size {
		t.Fatalf("size %#x after a READ sent before the SETATTR answered after it, want %#x", i.attr.Size, truncated.Size)
	}

	// A call sent after the change is taken (another client's change).
	later := truncated
	later.Size, later.Ctime = 0x100, nfs3.Time{Sec: 12}
	i.postOpLocked(&later, fs.attrStart(), now)
	if i.attr.Size != later.Size {
		t.Fatalf("size %#x: attributes of a call sent after the change were dropped", i.attr.Size)
	}

	// A modifying reply without post-op attributes (invalidation) also counts.
	getattrStart := fs.attrStart()
	i.wccLocked(&nfs3.WccData{}, now)
	i.postOpLocked(&old, getattrStart, now)
	if i.attr.Size != later.Size || !i.attrAt.IsZero() {
		t.Fatalf("size %#x, fetched at %v: a GETATTR sent before an invalidating change refilled the cache", i.attr.Size, i.attrAt)
	}
}

// A lock grant drops the cached attributes for good: a GETATTR (or a READ of
// the kernel's readahead) sent before the grant and answered after it carries
// attributes from before the lock holder's last writes, and must not refill
// the cache, or the size and mtime SQLite checks under its lock are stale.
func TestPostOpAttributesBeforeLockGrantDropped(t *testing.T) {
	fs := &FS{cfg: Config{AcRegMin: 3 * time.Second, AcRegMax: 60 * time.Second}, nl: &nlmFS{}}
	fs.ops = nfsOps{fs}
	now := time.Now()
	i := &Inode{fs: fs, Type: nfs3.TypeReg}
	old := nfs3.Fattr{Type: nfs3.TypeReg, Size: 8192, Mtime: nfs3.Time{Sec: 10}, Ctime: nfs3.Time{Sec: 10}}
	i.postOpLocked(&old, fs.attrStart(), now)

	getattrStart := fs.attrStart() // a GETATTR is sent
	fs.lockGranted(i)              // the lock is granted (the holder wrote since)
	i.mu.Lock()
	i.postOpLocked(&old, getattrStart, now) // the GETATTR's reply
	fetched := i.attrAt
	i.mu.Unlock()
	if !fetched.IsZero() {
		t.Fatalf("attributes fetched at %v: a GETATTR sent before a lock grant refilled the cache after it", fetched)
	}
	// A call sent after the grant is taken.
	newer := old
	newer.Size, newer.Mtime, newer.Ctime = 12288, nfs3.Time{Sec: 11}, nfs3.Time{Sec: 11}
	i.mu.Lock()
	i.postOpLocked(&newer, fs.attrStart(), now)
	i.mu.Unlock()
	if i.attr.Size != newer.Size || i.attrAt.IsZero() {
		t.Fatalf("size %d: attributes of a GETATTR sent after the grant were dropped", i.attr.Size)
	}
}
