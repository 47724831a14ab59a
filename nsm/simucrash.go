package nsm

// SM_SIMU_CRASH (5) (XNFS chapter 11, SM_SIMU_CRASH): behave as if this host
// had restarted: advance the state number and notify every monitored host.
// It has neither arguments nor a result.
