// Package snfs1 holds the snfs consistency protocol, version 1 (docs/protocol.md):
// the SNFS program a client calls (REGISTER, OPEN, OPEN_NAME, CLOSE, RECLAIM,
// RECLAIM_DONE, UNREGISTER, APPEND: a write the server places at its end
// of file, append.go, and GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR: RFC
// 8276's extended attributes of the user namespace, xattr.go, and ALLOCATE: fallocate(2) on the server's file,
// allocate.go, and LISTDIR and DIR_RELEASE: directory promises, listdir.go,
// dirrelease.go, and CREATE_OPEN: CREATE and OPEN in one call, createopen.go) and the
// SNFS_CB program the server calls back on the client's own connection
// (CALLBACK). It is Spritely NFS's OPEN/CLOSE/CALLBACK (Srinivasan and Mogul,
// section 3), with NFSv4's client registration and a few lessons learned since.
//
// It owns the constants and the XDR types of both programs, encoded and decoded by
// the same code on the server and on the client. Decoders are bounded (handles
// nfs3.FHSize, file names nfs3.MaxPath, client names NameLen, extended
// attribute names, values and lists XattrNameMax, XattrSizeMax, XattrListMax)
// and fuzzed. It must not
// touch files or sockets, nor know the server's state table: it is wire format only.
package snfs1
