// Package drcstore keeps the replies of sunrpc's duplicate request cache in a
// bbolt database in the server's state directory (replies.db): a
// sunrpc.ReplyStore. With it, a call that a client retransmits across a
// restart of the server (the first attempt took effect, its reply was lost
// with the connection) gets the reply of the first attempt instead of being
// executed a second time, as a create answered EEXIST or a remove answered
// ENOENT although the first attempt succeeded.
//
// It owns the database file and its bounds: at most MaxCount replies, none
// older than MaxAge; the oldest are deleted by the commit that saves newer
// ones. Replies are kept in the order they were saved (a sequence number is
// the key), so the oldest are always at the front.
//
// It must not: decide which procedures are saved (the procedure tables do,
// sunrpc.Proc.Persist), know NFS, or flush anything but its own file.
package drcstore
