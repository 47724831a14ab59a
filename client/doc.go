// Package client is the Go client for MOUNT v3 and NFSv3: one method per procedure
// over a sunrpc.Client, which keeps many calls in flight on one TCP connection,
// resends with the same xid after a timeout or reconnect (so the server's reply
// cache answers a retransmitted non-idempotent call), and retransmits over UDP.
//
// Methods return the decoded nfs3 result and a transport error; a result whose
// Status is not OK is not an error at this level (callers often need the wcc_data
// of a failed call). Use Status.Err() to turn it into one.
//
// What it must not do: cache anything. Caching belongs to the snfs mount client.
package client
