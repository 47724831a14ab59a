package nsm

// SM_UNMON_ALL (4) (XNFS chapter 11, SM_UNMON_ALL): stop every monitoring
// that MyID asked for (a lock manager that restarts). The argument is MyID,
// the result Stat (the monitor's own state number).

// UnmonAllArgs is the argument of SM_UNMON_ALL.
type UnmonAllArgs = MyID
