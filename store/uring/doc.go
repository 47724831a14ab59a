// Package uring flushes files through io_uring(7): an fsync or fdatasync is
// submitted to a ring and runs in the kernel's io-wq worker, and the goroutine that
// asked waits on a channel until a reaper goroutine, woken through an eventfd in the
// netpoller, hands it the result.
//
// Why. An fsync(2) on this kind of disk takes most of a millisecond, and in the Go
// runtime a goroutine in a system call keeps its P out of the idle set for that
// long. The runtime's monitor thread (sysmon) sleeps soundly only while every P
// is idle; while one is in a system call it wakes every 20 µs for the first
// millisecond, and it is woken anew by the first system call of each request. So
// each stable WRITE or COMMIT cost dozens of extra thread wakeups under a client
// that writes small files one at a time, as the Linux client's untar does
// (docs/measurements.md). Waiting on a channel holds no P.
//
// What it owns: the ring (its mappings, its eventfd, the reaper goroutine, which
// Close stops after the flushes in flight), and the mapping of completions to
// waiters. The flush itself is the same fsync or fdatasync on the same descriptor,
// with the same error. Submission is a raw call (package rawsys).
//
// What it must not do: decide durability policy, or hide a flush it did not do.
// When the ring cannot flush (New fails on an old kernel, with io_uring_disabled or
// under a seccomp filter; the ring is closed; the submission or the completion was
// refused or cancelled), Fsync returns ErrNotFlushed and the caller (package store)
// makes the plain system call itself. It knows nothing of handles, files or NFS.
package uring
