// Package fusefs is the bridge between go-fuse's fs API and package vfs: one
// node per NFS file handle (its number the vfs inode's Ino: an object made
// locally keeps its local inode's node and number once the server made it,
// vfs/inoalias.go), FUSE requests translated to vfs calls, vfs errors
// turned into errno values in one place (errno.go), and the kernel's caches
// (entries, attributes, pages) driven by the vfs's decisions: entry and
// attribute timeouts are the remaining lifetimes of the vfs's cached
// attributes, and an open keeps the kernel's pages (FOPEN_KEEP_CACHE) only
// when the vfs says the file is unchanged since they were cached; an opendir
// keeps and fills the kernel's cached listing (FOPEN_CACHE_DIR) likewise.
//
// A request is served with its own context, cancelled when the kernel
// interrupts it (a signal to the waiting process), where abandoning it
// halfway leaves nothing half applied; a request that changes the server's
// state is checked before it begins and then finishes (ctx.go).
//
// The operations whose meaning depends on the mount's mode (opens, reads,
// writes, closes, attribute changes, locks, fallocate, extended attributes)
// go to the vfs.Ops the FS chose for its mode (the NFSv3 core's or the snfs
// cache manager's), taken once, at Mount; the rest go to the vfs.FS.
//
// It owns: the go-fuse nodes and their lifetimes, errno mapping, the FUSE
// mount options and capabilities (passthrough registration of backing files,
// HANDLE_KILLPRIV_V2, default_permissions), the kernel notifications the vfs
// asks for, unmounting (forced when a normal unmount does not work).
//
// It must not: decide caching, consistency or what goes to the server (the
// vfs does), or keep file state of its own beyond what go-fuse needs.
package fusefs
