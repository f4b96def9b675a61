package streams_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests if one leaves a goroutine behind: every
// tunnel's serve func must have stopped what it started when it returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
