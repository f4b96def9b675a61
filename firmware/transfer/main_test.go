package transfer

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests if one leaves a goroutine behind: a Fetch or a
// served stream must have stopped all it started when it returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
