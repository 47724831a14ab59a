package state

import "time"

// cmlTables is what the CML models (cml_model_test.go, cml_model_mkdir_test.go)
// share: the permits' and promises' tables driven as consist drives them,
// the callbacks they sent that are in transit, and the changes parked
// behind them.
type cmlTables struct {
	now     time.Time
	d       *Dirs
	p       *Permits
	calls   []Callback
	parked  map[ReqID]func()
	ready   []ReqID
	nextReq ReqID
}

func (m *cmlTables) req() ReqID { m.nextReq++; return m.nextReq }

// park waits req (Wait from a table) with fn to run when it proceeds.
func (m *cmlTables) park(req ReqID, fn func()) { m.parked[req] = fn }

// carry carries out a table's action a, a fence excepted (false: each
// model has its own); failf reports a request answered twice.
func (m *cmlTables) carry(a Action, failf func(string, ...any)) bool {
	switch a.Kind {
	case ActCallback:
		m.calls = append(m.calls, a.Callback)
		if a.Callback.Mode == RecallPermit {
			m.p.CallbackSent(m.now, a.Callback)
		} else {
			m.d.CallbackSent(m.now, a.Callback)
		}
	case ActProceed:
		if m.parked[a.Req] == nil {
			failf("request %d answered twice, or never parked", a.Req)
		} else {
			m.ready = append(m.ready, a.Req)
		}
	default:
		return false
	}
	return true
}
