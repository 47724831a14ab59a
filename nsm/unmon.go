package nsm

// SM_UNMON (3) (XNFS chapter 11, SM_UNMON): stop monitoring MonID.MonName for
// MonID.MyID. The argument is MonID, the result Stat (the monitor's own
// state number).

// UnmonArgs is the argument of SM_UNMON.
type UnmonArgs = MonID
