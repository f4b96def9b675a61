package agent_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests if one leaves a goroutine behind: Run must have
// stopped its loop, pod workers, sync client and checkpoint when it
// returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
