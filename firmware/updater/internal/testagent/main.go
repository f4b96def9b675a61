// Command testagent is a stand-in for outpost-edge in the updater's tests:
// it boots through the updater like the agent does, reports what it runs
// in a control directory, and installs, commits and reverts on commands
// the test writes there. Its version and behaviour are set at link time:
//
//	go build -ldflags "-X main.version=1.1.0 -X main.mode=ok" ./internal/testagent
//
// Modes: ok (follows commands), crash (exits 3 right after Boot), hang
// (ignores SIGTERM and never commits). Only the updater's tests build it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/updater"
	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

var (
	version = "0.0.0"
	mode    = "ok"
)

// Status is what the agent writes to <ctl>/status.json at each start.
type Status struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	Slot    string `json:"slot"`
	Trial   bool   `json:"trial"`
	Boots   int    `json:"boots"`
}

// Command is what the test writes to <ctl>/cmd.json.
type Command struct {
	Seq       int                `json:"seq"`
	Op        string             `json:"op"` // install, commit, revert-committed
	Release   string             `json:"release,omitempty"`
	Version   string             `json:"version,omitempty"`
	Artifact  string             `json:"artifact,omitempty"`
	Component manifest.Component `json:"component"`
	Window    time.Duration      `json:"window,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testagent:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, ctl := os.Getenv("TESTAGENT_DIR"), os.Getenv("TESTAGENT_CTL")
	grace, _ := time.ParseDuration(os.Getenv("TESTAGENT_GRACE"))
	cfg := updater.DefaultConfig(dir)
	cfg.Grace = grace
	cfg.AfterStep = func(step string) error {
		if b, _ := os.ReadFile(filepath.Join(ctl, "pause")); string(b) == step {
			// Stop here, as if the power went: the test kills -9.
			atomicfile.WriteFile(filepath.Join(ctl, "paused"), []byte(step+" "+strconv.Itoa(os.Getpid())), 0o644)
			select {}
		}
		return nil
	}
	u, err := updater.New(cfg)
	if err != nil {
		return err
	}
	d, err := u.Boot()
	if err != nil && !errors.Is(err, updater.ErrCorruptState) {
		return err
	}
	if !d.RunsHere() {
		return u.Exec(os.Args[1:], os.Environ())
	}
	st := Status{PID: os.Getpid(), Version: version, Slot: d.Slot, Trial: d.Trial != nil}
	if d.Trial != nil {
		st.Boots = d.Trial.Boots
	}
	b, _ := json.Marshal(st)
	if err := atomicfile.WriteFile(filepath.Join(ctl, "status.json"), b, 0o644); err != nil {
		return err
	}
	switch mode {
	case "crash":
		os.Exit(3)
	case "hang":
		signal.Ignore(syscall.SIGTERM)
		select {}
	}
	done := 0
	if b, err := os.ReadFile(filepath.Join(ctl, "done")); err == nil {
		done, _ = strconv.Atoi(string(b))
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		b, err := os.ReadFile(filepath.Join(ctl, "cmd.json"))
		if err != nil {
			continue
		}
		var c Command
		if json.Unmarshal(b, &c) != nil || c.Seq <= done {
			continue
		}
		done = c.Seq
		if err := atomicfile.WriteFile(filepath.Join(ctl, "done"), []byte(strconv.Itoa(done)), 0o644); err != nil {
			return err
		}
		exec, err := handle(u, c)
		result := "ok"
		if err != nil {
			result = err.Error()
		}
		if err := atomicfile.WriteFile(filepath.Join(ctl, "result-"+strconv.Itoa(c.Seq)), []byte(result), 0o644); err != nil {
			return err
		}
		if exec && err == nil {
			return u.Exec(os.Args[1:], os.Environ())
		}
		if c.Op == "commit" && err == nil {
			st.Trial, st.Boots = false, 0
			b, _ := json.Marshal(st)
			if err := atomicfile.WriteFile(filepath.Join(ctl, "status.json"), b, 0o644); err != nil {
				return err
			}
		}
	}
}

// handle runs c and reports whether the agent must exec afterwards.
func handle(u *updater.Updater, c Command) (bool, error) {
	switch c.Op {
	case "install":
		return true, u.InstallAgent(context.Background(), c.Release, c.Version, c.Artifact, c.Component, c.Window, false)
	case "commit":
		return false, u.Commit()
	case "revert-committed":
		return true, u.RevertCommitted(updater.RevertOrdered, "the rollout reverts")
	}
	return false, fmt.Errorf("unknown op %q", c.Op)
}
