package sim

import "time"

// recoverHorizon is how long after a fault ends its traffic is still
// followed, to time the recovery.
const recoverHorizon = 10 * time.Minute

// minBucketVolume is the attempts a one-second bucket needs before its
// shares are judged, and sustain how many buckets in a row a condition must
// hold: one quiet second by chance is not a detection.
const (
	minBucketVolume = 5
	sustain         = 5
)

// faultTrack counts, per second from a fault's start, the attempts sent to
// the fault's target(s) and how many of them went to the fault's routes.
type faultTrack struct {
	Fault
	member []bool // by route
	n      int    // member routes
	total  []int32
	bad    []int32
}

func newFaultTrack(f Fault, routes int) faultTrack {
	t := faultTrack{Fault: f, member: make([]bool, routes)}
	for _, r := range f.Routes {
		if r >= 0 && r < routes && !t.member[r] {
			t.member[r] = true
			t.n++
		}
	}
	return t
}

func (f *faultTrack) active(at time.Duration) bool {
	return at >= f.Start && (f.End == 0 || at < f.End)
}

func (f *faultTrack) covers(route, target int) bool {
	return f.member[route] && (f.Target < 0 || f.Target == target)
}

// count records an attempt of route at target.
func (f *faultTrack) count(at time.Duration, route, target int) {
	if at < f.Start || (f.End != 0 && at >= f.End+recoverHorizon) || (f.Target >= 0 && target != f.Target) {
		return
	}
	i := int((at - f.Start) / faultBucket)
	for len(f.total) <= i {
		f.total = append(f.total, 0)
		f.bad = append(f.bad, 0)
	}
	f.total[i]++
	if f.member[route] {
		f.bad[i]++
	}
}

// detect is the time from the fault's start to the end of the first second
// from which its routes got under 5% of the attempts for sustain seconds;
// false if never while the fault lasted.
func (f *faultTrack) detect() (time.Duration, bool) {
	last := len(f.total)
	if f.End != 0 {
		last = min(last, int((f.End-f.Start)/faultBucket))
	}
	i, ok := f.firstSustained(0, last, func(bad, total float64) bool { return bad < 0.05*total })
	return time.Duration(i+1) * faultBucket, ok
}

// recover is the time from the fault's end to the end of the first second
// from which its routes were back to at least half their fair share of the
// attempts for sustain seconds; false if never (or the fault never ends).
func (f *faultTrack) recover(routes int) (time.Duration, bool) {
	if f.End == 0 || f.n == 0 {
		return 0, false
	}
	fair := float64(f.n) / float64(routes)
	first := int((f.End - f.Start) / faultBucket)
	i, ok := f.firstSustained(first, len(f.total), func(bad, total float64) bool { return bad >= 0.5*fair*total })
	return time.Duration(i+1-first) * faultBucket, ok
}

// firstSustained returns the first bucket in [from, to) from which cond
// holds for sustain buckets in a row, skipping buckets under the minimum
// volume.
func (f *faultTrack) firstSustained(from, to int, cond func(bad, total float64) bool) (int, bool) {
	run, start := 0, 0
	for i := from; i < to; i++ {
		if f.total[i] < minBucketVolume {
			continue
		}
		if !cond(float64(f.bad[i]), float64(f.total[i])) {
			run = 0
			continue
		}
		if run == 0 {
			start = i
		}
		if run++; run == sustain {
			return start, true
		}
	}
	return 0, false
}

// faultTimes averages detection and recovery over the faults that exits
// can be blamed for (not a site down for everyone, not the whole pool);
// -1 where there is nothing to average.
func faultTimes(faults []faultTrack, routes int) (detectMs, recoverMs float64) {
	var dSum, rSum time.Duration
	var dN, rN int
	for i := range faults {
		f := &faults[i]
		if f.SiteDown || f.n == 0 || f.n == routes {
			continue
		}
		if d, ok := f.detect(); ok {
			dSum += d
			dN++
		}
		if r, ok := f.recover(routes); ok {
			rSum += r
			rN++
		}
	}
	detectMs, recoverMs = -1, -1
	if dN > 0 {
		detectMs = float64(dSum) / float64(dN) / float64(time.Millisecond)
	}
	if rN > 0 {
		recoverMs = float64(rSum) / float64(rN) / float64(time.Millisecond)
	}
	return detectMs, recoverMs
}
