package main

// equivalents lists the generated mutants that survive the tests because
// they cannot change an outcome, each with the reason. A mutant listed here
// is not counted as guarantee-breaking; every other survivor is, and must be
// killed by a test. Keys are generated IDs (<dialect>:<statement>:<op>#<n>).
var equivalents = map[string]string{}
