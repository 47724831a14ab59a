// Package nlm4 holds the Network Lock Manager protocol, version 4 (program
// 100021): the byte-range and share locks of NFS version 3 clients. Version 4
// is NLM version 3 with 64-bit offsets and lengths, the new statuses
// NLM4_DEADLCK to NLM4_FAILED, and NFSv3 file handles (RFC 1813, Appendix II,
// "Lock manager protocol"). The argument and result types are not in the RFC;
// they are the Open Group's XNFS, Version 3W, chapter 10, "Network Lock
// Manager Protocol" (pubs.opengroup.org/onlinepubs/9629799/chap10.htm), whose
// XDR is also the NLM_VERS4 part of rpcsvc/nlm_prot.x (FreeBSD, glibc) and
// Linux's Documentation/sunrpc/xdr/nlm4.x.
//
// It owns the constants and the XDR types of every procedure, one procedure
// per file with its _MSG and _RES forms (the asynchronous calls that carry the
// same arguments, and the results as calls back to the requester), encoded
// and decoded by the same code on the server and on a client. Names follow the
// XDR in Go case (nlm4_lockargs is LockArgs, nlm4_res is Res):
//
//	procedure                      argument    result
//	NULL 0                         void        void
//	TEST 1                         TestArgs    TestRes
//	LOCK 2, NM_LOCK 22             LockArgs    Res
//	CANCEL 3                       CancArgs    Res
//	UNLOCK 4                       UnlockArgs  Res
//	GRANTED 5 (server to client)   TestArgs    Res
//	TEST_MSG 6 .. GRANTED_MSG 10   as 1 to 5   void (the answer is a _RES call)
//	TEST_RES 11                    TestRes     void
//	LOCK_RES 12 .. GRANTED_RES 15  Res         void
//	SHARE 20, UNSHARE 21           ShareArgs   ShareRes
//	FREE_ALL 23                    Notify      void
//
// Decoders are bounded and never allocate from an unchecked length: a
// caller_name at most MaxStrLen bytes, a file handle at most nfs3.FHSize (an
// NFSv3 handle; Linux's client sends at most NFS3_FHSIZE), an owner handle or
// a cookie at most MaxNetobj (the netobj bound of the XDR). Statuses and share
// modes outside their enums, and booleans other than 0 and 1, are decoding
// errors. Decoded byte fields (cookies, handles, owners) alias the request
// buffer: a lock manager that keeps one past the request must copy it.
//
// What it must not do: touch files or sockets, or know lock semantics (which
// ranges conflict, who waits): that is the lock manager's.
package nlm4
