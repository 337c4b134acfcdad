package engine

import "fmt"

// State is where a route, or a route×target pair, stands in the health
// state machine (see the package documentation for the transitions).
type State uint8

// The states (docs/design/006-model.md: what each allows and what
// moves a record out of it).
const (
	Candidate State = iota // new, too little evidence to judge; eligible
	Healthy                // eligible at full weight
	Suspect                // failing recently; eligible at reduced weight
	Cooling                // excluded until its cooldown deadline
	HalfOpen               // cooldown over: probes only, no user traffic
	Ejected                // failed repeated recoveries: excluded for a growing time
	Draining               // operator or reload: no new work, in-flight finishes

	numStates = iota
)

var stateNames = [numStates]string{
	Candidate: "candidate",
	Healthy:   "healthy",
	Suspect:   "suspect",
	Cooling:   "cooling",
	HalfOpen:  "half_open",
	Ejected:   "ejected",
	Draining:  "draining",
}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Usable reports whether a route in state s may carry users' traffic.
func (s State) Usable() bool { return s <= Suspect }

// ParseState returns the state named s (as printed by String).
func ParseState(s string) (State, error) {
	for i, name := range stateNames {
		if name == s {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("unknown state %q", s)
}

// MarshalText implements encoding.TextMarshaler.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("invalid state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
