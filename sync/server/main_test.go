package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests if one leaves a goroutine behind: Serve and the
// client's Run must have stopped everything they started by the time they
// return, and every test stops both.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
