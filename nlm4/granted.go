package nlm4

// GRANTED (5), GRANTED_MSG (10) and GRANTED_RES (15) (XNFS chapter 10,
// NLM_GRANTED; RFC 1813 Appendix II, NLMPROC4_GRANTED) run the other way: the
// server calls the client's lock manager to say that a LOCK it answered with
// Blocked is now held. The argument is TestArgs, with the lock as the client
// requested it (Exclusive included) and a cookie of the server's choosing;
// the client answers with Res (Denied when the lock matches no request it is
// waiting on, DeniedGracePeriod while it recovers from its own restart), in
// the reply to GRANTED or in a GRANTED_RES call for a GRANTED_MSG. What the
// server does with a Denied grant is the lock manager's decision.

// GrantedArgs is the argument of GRANTED and GRANTED_MSG.
type GrantedArgs = TestArgs
