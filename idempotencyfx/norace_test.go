//go:build !race

package idempotencyfx

// raceDetector reports a build with -race (timing bounds are skipped).
const raceDetector = false
