package sqlite

// Exported for the tests of package sqlite_test.
var (
	IsUniqueViolation = isUniqueViolation
	IsRetryable       = isRetryable
)

// LockSuffix names the migration lock file beside a database.
const LockSuffix = lockSuffix

// RunInTx is the Store's inTx.
var RunInTx = (*Store).inTx
