// Package mount is the one way an `snfs mount` is put together, shared by
// cmd/snfs and the tests: Open connects to the server and sets up the export
// in the mode asked (nfs: NFS and MOUNT connections, MNT, vfs.New; snfs: the
// cache directory and the consistency protocol's session, cachemgr.OpenSNFS;
// auto: an SNFS NULL first, ChooseMode), Serve mounts it with FUSE
// (fusefs.Mount), Unmount unmounts it, Finish writes back what is left and
// tells the server (UMNT), and Close releases the rest.
//
// It owns: the order of a mount's setup and end, and the connections of nfs
// mode (snfs mode's session belongs to its FS).
//
// It must not: parse flags, log in, serve metrics, handle signals or detach
// (cmd/snfs does), or decide anything about caching or the protocol (vfs
// does; fusefs translates).
package mount
