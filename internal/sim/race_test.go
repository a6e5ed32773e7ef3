//go:build race

package sim

// raceEnabled: the race detector makes a schedule several times slower, so
// the default budget is smaller (scripts/test.sh runs the full budget in a
// step of its own, without -race).
const raceEnabled = true
