package nodelifecycle

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests if one leaves a goroutine behind: Run must
// have stopped its workers, and Presence.Run its loop, when they return.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
