package relay_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests if one leaves a goroutine behind: Run must have
// stopped everything it started when it returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
