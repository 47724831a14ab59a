// Package client is the Go client for MOUNT v3, NFSv3 and the snfs consistency
// protocol (snfs1).
//
// NFS and Mounter have one method per procedure over a sunrpc.Client, which
// keeps many calls in flight on one TCP connection, resends with the same xid
// after a timeout or reconnect (so the server's reply cache answers a
// retransmitted non-idempotent call), and retransmits over UDP. Their methods
// return the decoded nfs3 result and a transport error; a result whose Status
// is not OK is not an error at this level (callers often need the wcc_data of
// a failed call). Use Status.Err() to turn it into one.
//
// # Sessions
//
// A Session (DialSession) is a client of the consistency protocol
// (docs/protocol.md). It owns one connection to the server that carries the
// client's NFSv3, MOUNT and SNFS calls (Session.NFS and Session.Mount are views
// of it) and the server's callbacks the other way, which it serves through the
// CallbackHandler it was given (the FUSE client). It owns the registration: the
// client name and boot verifier, and what the latest REGISTER returned (client
// id, server verifier, callback timeout). REGISTER is the first call on every
// new connection, so after a reconnect the server moves the client's callback
// path to it. A changed server verifier (the server restarted) makes the
// session reclaim the client's state on the new connection before anything
// else uses it (SessionConfig.Reclaim, RECLAIM, RECLAIM_DONE), then report the
// restart, and whether the server refused the reclaim, through
// SessionConfig.OnServerRestart. Unregister ends the registration on a clean
// unmount.
//
// Reach (reach.go) is whether a client reaches its server, for `snfs
// status`: a Session keeps one (Session.Reach) from its connections, its
// reconnection attempts, the server watch and its recovery after a restart;
// a plain client gets one through Reach.Hook and TrackServerState.
//
// OPEN, OPEN_NAME and CLOSE return a non-OK status as a *StatusError that
// unwraps to the status (errors.Is(err, snfs1.ErrFenced)). They retry what the
// protocol says to retry: NFS3ERR_JUKEBOX (the server is still calling other
// clients back) with back-off and a new request each time, until the context
// ends; SNFS_ERR_STALE_CLIENTID once, after registering again.
//
// What it must not do: cache anything, or track opens. The session does not
// know which files are open, what is cached at which version, or what is
// dirty; it does not re-open files after a server restart nor act on a
// callback itself. All of that belongs to the snfs mount client, which caches
// and answers callbacks.
package client
