package state

// Table 1 of the Spritely NFS paper ("SNFS server state transitions", section
// 4.3.4) as data, so that the same rows can drive this machine (table1_test.go)
// and, later, the server through real RPCs. A row whose paper line says "A or B"
// is split into one row per alternative.

// Step is one OPEN or CLOSE by an abstract client numbered from 1. Distinct
// numbers are distinct client hosts, all registered with a verified callback
// path.
type Step struct {
	Close  bool
	Client int
	Mode   Mode
	// Dirty is what a CLOSE reports: the paper's clients always may hold dirty
	// blocks after writing, so the rows close with Dirty true.
	Dirty bool
}

// RowCallback is a callback a row expects: to Client, of Mode.
type RowCallback struct {
	Client int
	Mode   CallbackMode
}

// Caching is the "Caching" column.
type Caching uint8

// Caching column values.
const (
	CachingNotAffected Caching = iota // a CLOSE: no reply to check
	CachingEnabled
	CachingDisabled
)

func (c Caching) String() string { return [...]string{"not affected", "enabled", "disabled"}[c] }

// Row is one transition. Setup starts from a file nobody has used (CLOSED), with
// every callback it causes answered OK at once, and leads to From; Event is the
// transition. Callbacks lists exactly the callbacks Event causes (in any order);
// answered OK, they let Event complete, leading to To. For an OPEN, Caching is
// the reply's cacheEnabled, and NewVersion says the reply's version is above
// every version the setup's replies carried. LastWriter, when not 0, is the client
// the file then records as possibly holding dirty blocks.
type Row struct {
	From       State
	When       string // the paper's "When" column
	Setup      []Step
	Event      Step
	To         State
	Caching    Caching
	Callbacks  []RowCallback
	LastWriter int
	NewVersion bool
}

func openStep(c int, m Mode) Step  { return Step{Client: c, Mode: m} }
func closeStep(c int, m Mode) Step { return Step{Close: true, Client: c, Mode: m, Dirty: true} }

// Table1Rows returns the rows of the paper's Table 1, in the paper's order.
func Table1Rows() []Row {
	closedDirty := []Step{openStep(1, Write), closeStep(1, Write)}
	oneRdrDirty := []Step{openStep(1, Write), openStep(1, Read), closeStep(1, Write)}
	multReaders := []Step{openStep(1, Read), openStep(2, Read)}
	cb := func(c int, m CallbackMode) []RowCallback { return []RowCallback{{c, m}} }
	return []Row{
		{From: Closed, When: "Open for read", Event: openStep(1, Read),
			To: OneReader, Caching: CachingEnabled},
		{From: Closed, When: "Open for write", Event: openStep(1, Write),
			To: OneWriter, Caching: CachingEnabled, NewVersion: true},
		{From: ClosedDirty, When: "Open for read by last writer", Setup: closedDirty, Event: openStep(1, Read),
			To: OneRdrDirty, Caching: CachingEnabled, LastWriter: 1},
		{From: ClosedDirty, When: "Open for read not by last writer", Setup: closedDirty, Event: openStep(2, Read),
			To: OneReader, Caching: CachingEnabled, Callbacks: cb(1, Writeback)},
		{From: ClosedDirty, When: "Open for write by last writer", Setup: closedDirty, Event: openStep(1, Write),
			To: OneWriter, Caching: CachingEnabled, LastWriter: 1, NewVersion: true},
		{From: ClosedDirty, When: "Open for write not by last writer", Setup: closedDirty, Event: openStep(2, Write),
			To: OneWriter, Caching: CachingEnabled, Callbacks: cb(1, WritebackInvalidate), LastWriter: 2, NewVersion: true},
		{From: OneReader, When: "Open for read by different client", Setup: []Step{openStep(1, Read)}, Event: openStep(2, Read),
			To: MultReaders, Caching: CachingEnabled},
		{From: OneRdrDirty, When: "Open for read not by last writer", Setup: oneRdrDirty, Event: openStep(2, Read),
			To: MultReaders, Caching: CachingEnabled, Callbacks: cb(1, Writeback)},
		{From: OneReader, When: "Open for write by same client", Setup: []Step{openStep(1, Read)}, Event: openStep(1, Write),
			To: OneWriter, Caching: CachingEnabled, LastWriter: 1, NewVersion: true},
		{From: OneRdrDirty, When: "Open for write by same client", Setup: oneRdrDirty, Event: openStep(1, Write),
			To: OneWriter, Caching: CachingEnabled, LastWriter: 1, NewVersion: true},
		{From: OneReader, When: "Open for write by different client", Setup: []Step{openStep(1, Read)}, Event: openStep(2, Write),
			To: WriteShared, Caching: CachingDisabled, Callbacks: cb(1, Invalidate), NewVersion: true},
		{From: MultReaders, When: "Open for write (by a third client)", Setup: multReaders, Event: openStep(3, Write),
			To: WriteShared, Caching: CachingDisabled, Callbacks: []RowCallback{{1, Invalidate}, {2, Invalidate}}, NewVersion: true},
		{From: MultReaders, When: "Open for write (by one of the readers)", Setup: multReaders, Event: openStep(1, Write),
			To: WriteShared, Caching: CachingDisabled, Callbacks: cb(2, Invalidate), NewVersion: true},
		{From: OneRdrDirty, When: "Open for write by different client", Setup: oneRdrDirty, Event: openStep(2, Write),
			To: WriteShared, Caching: CachingDisabled, Callbacks: cb(1, WritebackInvalidate), NewVersion: true},
		{From: MultReaders, When: "Open for read (by a third client)", Setup: multReaders, Event: openStep(3, Read),
			To: MultReaders, Caching: CachingEnabled},
		{From: MultReaders, When: "Open for read (by one of the readers)", Setup: multReaders, Event: openStep(1, Read),
			To: MultReaders, Caching: CachingEnabled},
		{From: OneWriter, When: "Open for read by different client", Setup: []Step{openStep(1, Write)}, Event: openStep(2, Read),
			To: WriteShared, Caching: CachingDisabled, Callbacks: cb(1, WritebackInvalidate)},
		{From: OneWriter, When: "Open for write by different client", Setup: []Step{openStep(1, Write)}, Event: openStep(2, Write),
			To: WriteShared, Caching: CachingDisabled, Callbacks: cb(1, WritebackInvalidate), NewVersion: true},
		{From: MultReaders, When: "Close by last but one reader", Setup: multReaders, Event: closeStep(2, Read),
			To: OneReader},
		{From: OneReader, When: "Final close", Setup: []Step{openStep(1, Read)}, Event: closeStep(1, Read),
			To: Closed},
		{From: WriteShared, When: "Final close", Setup: []Step{openStep(1, Read), openStep(2, Write), closeStep(1, Read)}, Event: closeStep(2, Write),
			To: Closed},
		{From: OneRdrDirty, When: "Final close", Setup: oneRdrDirty, Event: closeStep(1, Read),
			To: ClosedDirty, LastWriter: 1},
		{From: OneWriter, When: "Final close (this client recorded as last writer)", Setup: []Step{openStep(1, Write)}, Event: closeStep(1, Write),
			To: ClosedDirty, LastWriter: 1},
		{From: OneWriter, When: "Final close for write, client still reading (recorded as last writer)",
			Setup: []Step{openStep(1, Write), openStep(1, Read)}, Event: closeStep(1, Write),
			To: OneRdrDirty, LastWriter: 1},
	}
}
