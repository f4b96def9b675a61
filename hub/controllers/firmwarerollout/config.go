package firmwarerollout

import (
	"errors"
)

// Config tunes the controller.
type Config struct {
	// Workers is how many rollouts are synced at once.
	Workers int
	// StuckFactor times a rollout's health window is how long a node may
	// stay Offered or Downloading with no progress before the controller
	// gives up on it for this rollout (state Failed, reason Timeout).
	StuckFactor int
	// MaxFailedVersions bounds the versions kept in a Node's
	// AnnotationFailedVersions; the oldest are dropped first.
	MaxFailedVersions int
}

// DefaultConfig returns the configuration the hub runs with.
func DefaultConfig() Config {
	return Config{
		Workers:           2,  // rollouts are few; two keep one slow sync from holding the rest
		StuckFactor:       3,  // 15 minutes with the default 5-minute health window
		MaxFailedVersions: 32, // as many as a node itself remembers
	}
}

// Validate reports the first field of c out of range.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return errors.New("firmwarerollout: Workers below 1")
	case c.StuckFactor < 1:
		return errors.New("firmwarerollout: StuckFactor below 1")
	case c.MaxFailedVersions < 1:
		return errors.New("firmwarerollout: MaxFailedVersions below 1")
	}
	return nil
}
