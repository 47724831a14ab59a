// Package hsm watches the reads and writes the kernel makes to cache files
// itself (FUSE passthrough), with fanotify pre-content events (Linux 6.14+),
// so that the mount can let a write open pass through while it alone caches
// the file and still learn, byte range by byte range, what is written once
// the file is shared (package vfs, pinned.go, is its user).
//
// It owns: a detached copy of the cache directory's mount (open_tree), under
// which the files handed to the kernel are opened; a fanotify group with a
// mount mark on that copy (FAN_PRE_ACCESS, FAN_ACCESS_PERM, FAN_MODIFY,
// reported per thread); per-inode ignore marks; the goroutine that reads the
// events and answers the permission ones.
//
// Per thread, a read is PRE_ACCESS(range) then ACCESS_PERM, and a write is
// PRE_ACCESS(range) then MODIFY once its data landed (before write(2)
// returns); ranges are whole pages. Writes through a shared mapping raise no
// event.
//
// A permission event is allowed unless the handler's Pre refuses it: the
// access then fails with the errno Pre gave (FAN_DENY_ERRNO), which the
// mount uses to fail the passthrough I/O of a process whose lock was lost.
//
// It must not: decide anything about caching or the protocol (its handler
// does), do I/O on the files it watches through the watched mount (the
// mount's own reads and writes use the normal path, or they would wait on
// their own events), or block answering a permission event on anything that
// waits for the event loop.
package hsm
