package export

import (
	"testing"
	"time"
)

func dur(d time.Duration) *time.Duration { return &d }

func TestEffectiveInterval(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		ref, sink, inventory *time.Duration
		floor, want          time.Duration
	}{
		{name: "default", want: 30 * time.Second},
		{name: "inventory", inventory: dur(time.Minute), want: time.Minute},
		{name: "sink beats inventory", sink: dur(time.Hour), inventory: dur(time.Minute), want: time.Hour},
		{name: "ref beats sink", ref: dur(0), sink: dur(time.Hour), want: 0},
		{name: "floor clamps", ref: dur(time.Second), floor: time.Minute, want: time.Minute},
		{name: "floor below", ref: dur(time.Hour), floor: time.Minute, want: time.Hour},
		{name: "zero clamped", ref: dur(0), floor: 5 * time.Minute, want: 5 * time.Minute},
	} {
		if got := EffectiveInterval(tc.ref, tc.sink, tc.inventory, tc.floor); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		now, last       time.Time
		interval        time.Duration
		changed, bumped bool
		want            action
		wantDue         time.Time
	}{
		{name: "change exports at once despite 1h", now: t0.Add(time.Second), last: t0, interval: time.Hour, changed: true, want: actDelta, wantDue: t0.Add(time.Second + time.Hour)},
		{name: "no change within interval", now: t0.Add(time.Minute), last: t0, interval: time.Hour, want: actDebounce, wantDue: t0.Add(time.Hour)},
		{name: "no change, interval elapsed", now: t0.Add(time.Hour), last: t0, interval: time.Hour, want: actFull, wantDue: t0.Add(2 * time.Hour)},
		{name: "zero never re-exports", now: t0.Add(24 * time.Hour), last: t0, interval: 0, want: actDebounce},
		{name: "zero exports changes", now: t0, last: t0, interval: 0, changed: true, want: actDelta},
		{name: "generation bump forces", now: t0.Add(time.Second), last: t0, interval: time.Hour, bumped: true, want: actFull, wantDue: t0.Add(time.Second + time.Hour)},
		{name: "never exported", now: t0, interval: time.Minute, want: actFull, wantDue: t0.Add(time.Minute)},
		{name: "sub-second wake floors at 1s", now: t0, last: t0, interval: time.Millisecond, changed: true, want: actDelta, wantDue: t0.Add(time.Second)},
	} {
		got, due := decide(tc.now, tc.last, tc.interval, tc.changed, tc.bumped)
		if got != tc.want || !due.Equal(tc.wantDue) {
			t.Errorf("%s: got %s due %s, want %s due %s", tc.name, got, due, tc.want, tc.wantDue)
		}
	}
}
