package streamsbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/bench/report"
)

// LogsResult is what logs -f measured: how long a line the ticker pod
// writes takes to reach the node's log file, and `logs -f` through the
// hub.
type LogsResult struct {
	Lines int `json:"lines"`
	// File is from the write into the pod's input to the line in the
	// container's log file on the node (looked at every millisecond).
	File report.Latency `json:"file"`
	// Follow is from the same write to the line read from `logs -f`.
	Follow report.Latency `json:"follow"`
}

// filePoll is how often the log file is looked at for File.
const filePoll = time.Millisecond

// measureLogs follows the ticker's log through the hub and writes
// cfg.LogLines lines into it, one every cfg.LogInterval, timing each to
// the log file and to the follower. A first line, not timed, makes sure
// the follow runs before the timed ones are written.
func (r *runner) measureLogs(ctx context.Context) (LogsResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pod, err := r.client.CoreV1().Pods(r.cfg.Namespace).Get(ctx, tickerPod, metav1.GetOptions{})
	if err != nil {
		return LogsResult{}, err
	}
	file, err := findLog(r.node.Dir, r.cfg.Namespace+"_"+tickerPod+"_"+string(pod.UID), container)
	if err != nil {
		return LogsResult{}, err
	}
	tail := int64(0)
	stream, err := r.client.CoreV1().Pods(r.cfg.Namespace).GetLogs(tickerPod, &corev1.PodLogOptions{Container: container, Follow: true, TailLines: &tail}).Stream(ctx)
	if err != nil {
		return LogsResult{}, fmt.Errorf("follow: %w", err)
	}
	defer stream.Close()
	follow, inFile := newArrivals(), newArrivals()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stream)
		for sc.Scan() {
			follow.saw(sc.Text(), time.Now())
		}
	}()
	go func() {
		defer wg.Done()
		pollFile(ctx, file, inFile)
	}()

	if _, err := r.writeLine(ctx, -1); err != nil {
		return LogsResult{}, err
	}
	if _, err := follow.wait(ctx, -1, r.cfg.OpTimeout); err != nil {
		return LogsResult{}, fmt.Errorf("the first line: %w", err)
	}
	written := make([]time.Time, r.cfg.LogLines)
	for i := range r.cfg.LogLines {
		if written[i], err = r.writeLine(ctx, i); err != nil {
			return LogsResult{}, err
		}
		if err := sleep(ctx, r.cfg.LogInterval); err != nil {
			return LogsResult{}, err
		}
	}
	var viaFile, viaFollow []time.Duration
	for i, w := range written {
		at, err := follow.wait(ctx, i, r.cfg.OpTimeout)
		if err != nil {
			return LogsResult{}, fmt.Errorf("line %d through logs -f: %w", i, err)
		}
		viaFollow = append(viaFollow, at.Sub(w))
		at, err = inFile.wait(ctx, i, r.cfg.OpTimeout)
		if err != nil {
			return LogsResult{}, fmt.Errorf("line %d in %s: %w", i, file, err)
		}
		viaFile = append(viaFile, at.Sub(w))
	}
	r.logf("logs -f measured")
	return LogsResult{Lines: r.cfg.LogLines, File: report.Summarize(viaFile), Follow: report.Summarize(viaFollow)}, nil
}

// markLine is line n as the benchmark writes it, without its newline.
func markLine(n int) string { return "mark " + strconv.Itoa(n) }

// writeLine writes line n into the ticker's FIFO and returns when it was
// written. The ticker's cat reopens the FIFO after each line: until it
// has, opening it finds no reader and is tried again.
func (r *runner) writeLine(ctx context.Context, n int) (time.Time, error) {
	deadline := time.Now().Add(r.cfg.OpTimeout)
	for {
		f, err := os.OpenFile(r.fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			at := time.Now()
			_, err = io.WriteString(f, markLine(n)+"\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return at, err
		}
		if !errors.Is(err, syscall.ENXIO) {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the ticker did not read its FIFO within %v", r.cfg.OpTimeout)
		}
		if err := sleep(ctx, 200*time.Microsecond); err != nil {
			return time.Time{}, err
		}
	}
}

// findLog returns the log file of attempt 0 of container c of the pod
// whose log directory is named dirName, under the node's data dir.
func findLog(nodeDir, dirName, c string) (string, error) {
	want := string(filepath.Separator) + filepath.Join(dirName, c, "0.log")
	var found string
	err := filepath.WalkDir(nodeDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // parts of containerd's state come and go
		}
		if strings.HasSuffix(p, want) {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	if err == nil && found == "" {
		err = fmt.Errorf("no log file ending in %s under %s", want, nodeDir)
	}
	return found, err
}

// pollFile reads the CRI log file at path as it grows, every filePoll,
// until ctx ends, and tells a when each line showed up.
func pollFile(ctx context.Context, path string, a *arrivals) {
	f, err := os.Open(path)
	if err != nil {
		a.fail(err)
		return
	}
	defer f.Close()
	var partial []byte
	buf := make([]byte, 64<<10)
	t := time.NewTicker(filePoll)
	defer t.Stop()
	for {
		n, err := f.Read(buf)
		now := time.Now()
		if n > 0 {
			partial = append(partial, buf[:n]...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				// TIMESTAMP STREAM TAG MESSAGE
				if f := strings.SplitN(string(partial[:i]), " ", 4); len(f) == 4 {
					a.saw(f[3], now)
				}
				partial = partial[i+1:]
			}
			continue
		}
		if err != nil && err != io.EOF {
			a.fail(err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// arrivals records when each mark line was seen.
type arrivals struct {
	mu     sync.Mutex
	at     map[int]time.Time
	err    error
	change chan struct{} // closed and replaced at each arrival
}

func newArrivals() *arrivals {
	return &arrivals{at: map[int]time.Time{}, change: make(chan struct{})}
}

func (a *arrivals) saw(line string, now time.Time) {
	n, err := strconv.Atoi(strings.TrimPrefix(line, "mark "))
	if err != nil || !strings.HasPrefix(line, "mark ") {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.at[n]; !ok {
		a.at[n] = now
	}
	close(a.change)
	a.change = make(chan struct{})
}

func (a *arrivals) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err = err
	close(a.change)
	a.change = make(chan struct{})
}

// wait returns when line n was seen, waiting at most timeout for it.
func (a *arrivals) wait(ctx context.Context, n int, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		a.mu.Lock()
		at, ok := a.at[n]
		err, ch := a.err, a.change
		a.mu.Unlock()
		switch {
		case ok:
			return at, nil
		case err != nil:
			return time.Time{}, err
		}
		select {
		case <-ch:
		case <-t.C:
			return time.Time{}, fmt.Errorf("%q not seen within %v", markLine(n), timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}
