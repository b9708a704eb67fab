package export

import (
	"time"
)

const (
	// DefaultInterval is the re-export interval when neither the reference,
	// the sink nor the inventory sets one (seed 000).
	DefaultInterval = 30 * time.Second
	// DefaultWatchdog is how often an exporter with nothing to do refreshes
	// its status entry (an interval of 0s, or a long one).
	DefaultWatchdog = 30 * time.Second
	// minWake floors timer wake-ups: intervals below 1s behave like 0s,
	// since a changed payload never waits for the interval anyway.
	minWake = time.Second
)

// EffectiveInterval is seed 000's rule:
// max(ref ?? sink ?? inventory ?? 30s, floor). nil means "not set".
func EffectiveInterval(ref, sinkDefault, inventory *time.Duration, floor time.Duration) time.Duration {
	d := DefaultInterval
	switch {
	case ref != nil:
		d = *ref
	case sinkDefault != nil:
		d = *sinkDefault
	case inventory != nil:
		d = *inventory
	}
	return max(d, floor)
}

// action is what an exporter run does.
type action int

const (
	// actDebounce: the sink holds the current payload and nothing is due.
	actDebounce action = iota
	// actDelta: export what changed (snapshot sinks write the whole
	// document; database and event sinks apply only the changed items).
	actDelta
	// actFull: an anti-drift full sync of an unchanged payload, or a
	// forced export after a generation bump.
	actFull
)

func (a action) String() string {
	return [...]string{"debounce", "delta", "full"}[a]
}

// decide chooses an exporter run's action and when the next unchanged
// re-export is due (zero when the interval is 0: never).
//   - a material change exports at once, whatever the interval;
//   - a generation bump forces a full export;
//   - otherwise an unchanged payload is re-exported only when the interval
//     has elapsed since the last export; 0 means never.
func decide(now, lastExport time.Time, interval time.Duration, changed, generationBumped bool) (action, time.Time) {
	act := actDebounce
	switch {
	case generationBumped:
		act = actFull
	case changed:
		act = actDelta
	case interval > 0 && (lastExport.IsZero() || !now.Before(lastExport.Add(interval))):
		act = actFull
	}
	if interval <= 0 {
		return act, time.Time{}
	}
	from := lastExport
	if act != actDebounce || from.IsZero() {
		from = now
	}
	return act, from.Add(max(interval, minWake))
}
