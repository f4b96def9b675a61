package etcdtest_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/outpost-mesh/outpost/hub/store/etcdstore/etcdtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func client(t *testing.T, s *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3.New: %v", err)
	}
	return cli
}

func TestRestartKeepsDataAndRevisions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := etcdtest.Start(t, t.TempDir())
	eps := s.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") || strings.HasSuffix(eps[0], ":0") {
		t.Fatalf("Endpoints() = %v, want one http://127.0.0.1:PORT", eps)
	}

	cli := client(t, s)
	put, err := cli.Put(ctx, "/a", "1")
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	cli.Close()

	s.Restart(t)
	cli = client(t, s)
	defer cli.Close()
	get, err := cli.Get(ctx, "/a")
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "1" {
		t.Fatalf("Get(/a) after restart = %v, want value 1", get.Kvs)
	}
	put2, err := cli.Put(ctx, "/b", "2")
	if err != nil {
		t.Fatalf("Put after restart: %v", err)
	}
	if put2.Header.Revision <= put.Header.Revision {
		t.Fatalf("revision after restart = %d, want > %d", put2.Header.Revision, put.Header.Revision)
	}
}

func TestStopClosesListenersAndIsIdempotent(t *testing.T) {
	s := etcdtest.Start(t, t.TempDir())
	addr := strings.TrimPrefix(s.Endpoints()[0], "http://")
	s.Stop()
	s.Stop()
	if eps := s.Endpoints(); len(eps) != 0 {
		t.Errorf("Endpoints() after Stop = %v, want none", eps)
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("dial %s after Stop succeeded, want the listener closed", addr)
	}
}
