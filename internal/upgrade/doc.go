// Package upgrade holds the tests that upgrade a database with live work in
// it: a database is migrated to an older schema, seeded with episodes as
// that release left them (running, queued, delayed, retrying, failed,
// done), migrated to the newest schema, and then run by nodes of this
// release, which must finish every live episode exactly once and leave the
// ended ones alone. They are the net under every migration that changes how
// work is stored.
package upgrade
