package recipes

// SweepLate is sweepLate, for the tests of package recipes_test, which
// run against the real server that TestMain starts.
var SweepLate = sweepLate
