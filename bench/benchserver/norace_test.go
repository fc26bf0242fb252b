//go:build !race

package main

// raceDetector reports a build with -race, which allocates more per
// request (TestStack_AllocationsPerRequest holds both counts).
const raceDetector = false
