package nsm

// SM_STAT (1) (XNFS chapter 11, SM_STAT): does the monitor know host Name,
// and what is its own state number? The argument is Name, the result
// StatRes.

// StatArgs is the argument of SM_STAT.
type StatArgs = Name
