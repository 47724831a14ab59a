// Package rawsys makes the short system calls of snfs's request path without
// entering the Go scheduler's system-call path (entersyscall/exitsyscall).
//
// Why. When every P of the process is idle (a server between two calls of a
// client that sends one at a time), the runtime's sysmon thread sleeps deeply; in
// Go 1.26 the next entersyscall wakes it, and on a wakeup "from a system call"
// sysmon resets its poll interval to 20 µs and polls until the process is idle
// again: a server whose client sends one call at a time pays several thread
// wakeups per call (measured in docs/measurements.md), CPU taken from a client on
// the same cores. A raw system call
// does not wake sysmon, and keeps its P for the call's duration.
//
// What goes through here. System calls that normally complete in microseconds
// and never wait for another process or the network: metadata operations on a
// local file system (stat, open, mkdir, unlink, name_to_handle_at, ...),
// non-blocking socket reads and writes (the caller parks on the netpoller on
// EAGAIN), small page-cache writes, io_uring submission. A raw call that does
// block (a cold inode read, a journal wait) holds its P meanwhile: with the other
// P free this costs a little parallelism, never progress.
//
// What must not. Calls that routinely take milliseconds keep the ordinary path,
// so the scheduler hands their P to other goroutines: fsync/fdatasync/syncfs,
// truncation, reads that may go to the disk, large writes that may be
// throttled, and the last close of a large removed file (it frees its blocks).
//
// Errors are the kernel's syscall.Errno values, as golang.org/x/sys/unix returns
// them; the signatures follow unix's so that a call site changes only its package.
package rawsys
