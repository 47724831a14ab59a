// Package store is snfs's storage layer (ganesha's FSAL): it turns file handles into
// open file descriptors on the local file system and performs file operations on
// them with the caller's identity. It knows nothing of XDR or NFS status codes: it
// returns unix.Stat_t values and errors wrapping syscall.Errno, which the server maps
// to protocol status in one place.
//
// Handles. A handle is the kernel's own handle from name_to_handle_at(2) (inode and
// generation, so it survives server restarts and turns stale when the object is
// deleted), prefixed with a format byte and the export id and followed by a MAC
// (HMAC-SHA256 truncated to 6 bytes) under a key kept in the state directory, so a
// client cannot forge a handle to reach a file it was never given. Handles are
// resolved with open_by_handle_at(2) against the export's root, as root, into O_PATH
// descriptors that are cached (cache.go); the server never follows a symlink itself
// (O_NOFOLLOW / AT_SYMLINK_NOFOLLOW everywhere) and ".." at an export root is the root.
// A handle's MAC is checked once per resolution: ResolveFor hands the caller the
// handle's export (to check the client's rights) between the check and the open, so
// no caller needs to parse a handle twice (HandleChecks counts the checks).
// RemoveExport (an exports reload) makes an export's handles stale at once; its root
// descriptors are reference-counted and closed when the last call using them ends,
// and, unless another export shares its file system, so are the cached descriptors
// and directory streams of that file system (it can then be unmounted).
//
// Identity. Operations run inside Store.As, which locks the goroutine to its OS
// thread and sets that thread's fsuid, fsgid and supplementary groups with raw
// per-thread syscalls, as ganesha does, so the kernel makes every permission decision
// and new objects are owned by the caller. The thread is restored to root before it is
// unlocked; if that ever failed, the goroutine would exit locked and the runtime would
// destroy the thread. Handle resolution happens outside As (open_by_handle_at needs
// CAP_DAC_READ_SEARCH, which a non-zero fsuid drops).
//
// READ and WRITE go through a read-write descriptor opened as root and cached beside
// the O_PATH one; permission is checked first with faccessat2(AT_EACCESS) as the
// caller, with the owner override that NFS servers grant (the owner of a file may
// write it even after making it read-only, as tar and cp -p expect).
//
// Removal. The store keeps a descriptor of every object it unlinks or replaces
// (Store.victim), so that the last close, which frees the inode and its blocks (and
// trims them on a file system mounted with discard), happens in the store's background
// goroutine after the reply instead of inside unlinkat (background.go); an empty file,
// cheap to free, is closed at once. The handle is stale as soon as the name is gone.
//
// Attributes for listings. READDIRPLUS reads entries' handles and attributes
// through ChildAttrs, which serves them from a per-inode cache kept fresh by this
// package's own operations (synchronously) and by a fanotify file-system mark
// for everyone else's changes, with a TTL for the few changes no event reports
// (the cache and its notifier are package attrcache; attrcache.go here fills it,
// invalidates it and turns the notifier's kernel handles into this package's
// keys); LOOKUP and GETATTR always ask the file system. Flushes go through an
// io_uring when the kernel allows one (package uring), and are plain system calls
// otherwise. Both subpackages sit below this one: they import nothing of it and
// know nothing of its handles.
//
// System calls. The short ones (metadata operations, small writes, io_uring
// submission) are raw calls through package rawsys, which do not wake the Go
// runtime's sysmon after an idle gap; flushes, truncation, reads, large writes and
// the last close of a large removed file take the ordinary path, so that their P
// is handed to other goroutines while they wait (rawsys's doc says why).
//
// What it must not do: decode requests, hold protocol state, or decide what a
// client is allowed to mount (that is the server's export table).
package store
