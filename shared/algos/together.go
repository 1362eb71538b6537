package algos

// Part is one limit of a request that several limits decide together (Together): the limit's
// algorithm, its identity's state and the request, and whether the limit is a shadow one (it
// logs what it would deny and never denies). Together fills Dec, and sets Committed when the
// request was applied to the state.
type Part struct {
	Alg       Algorithm
	State     *State
	Req       Request
	Shadow    bool
	Dec       Decision
	Committed bool
}

// Together decides one request against every limit it falls under, all or nothing, and reports
// whether the request was admitted. Each part is first decided as a dry run; the request is
// admitted when none of them denies it (shadow parts do not count) and denied is false (another
// limit, decided elsewhere, refused it). Then:
//   - admitted: every part is committed (decided again, not as a dry run), shadow parts too;
//   - refused: only the parts that start a ban are, the denials of non-shadow parts with a ban
//     (their commit takes nothing: it starts the ban); the others are left as they were.
//
// A committed part's Dec is its commit's; the others keep their dry run's. The parts' states
// must be distinct: a commit changes nothing another part reads.
//
// This is the transition of the multi-rule Redis script (scripts.Mixed's all-or-nothing groups),
// which runs it atomically in one call; the two are tied by golden vectors and differential tests
// on a real redis-server as each algorithm and its script are. A part is never a release or a
// partial request, which Together does not look at.
func Together(parts []Part, denied bool) bool {
	admit := !denied
	for i := range parts {
		p := &parts[i]
		r := p.Req
		r.DryRun = true
		p.Dec, p.Committed = p.Alg.Decide(p.State, r), false
		if !p.Dec.Allowed && !p.Shadow {
			admit = false
		}
	}
	for i := range parts {
		p := &parts[i]
		if admit || !p.Shadow && !p.Dec.Allowed && p.Alg.Script().Ban > 0 {
			r := p.Req
			r.DryRun = false
			p.Dec, p.Committed = p.Alg.Decide(p.State, r), true
		}
	}
	return admit
}
