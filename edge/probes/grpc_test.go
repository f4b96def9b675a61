package probes

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
)

// grpcServer serves s on a loopback port until the test ends and returns
// the port.
func grpcServer(t *testing.T, register func(*grpc.Server)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(ln) })
	t.Cleanup(func() { s.Stop(); wg.Wait() })
	return serverPort(t, ln.Addr().String())
}

// hangingHealth answers Check only when the call's context ends, and
// records the User-Agent and deadline it was called with.
type hangingHealth struct {
	healthpb.UnimplementedHealthServer
	mu       sync.Mutex
	ua       []string
	deadline bool
}

func (h *hangingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	_, ok := ctx.Deadline()
	h.mu.Lock()
	h.ua, h.deadline = md.Get("user-agent"), ok
	h.mu.Unlock()
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func TestGRPCProbe(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus("cache", healthpb.HealthCheckResponse_SERVING)
	port := grpcServer(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, hs) })
	bare := grpcServer(t, func(*grpc.Server) {})
	hang := &hangingHealth{}
	hanging := grpcServer(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, hang) })
	h1 := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(h1.Close)
	httpPort := serverPort(t, h1.Listener.Addr().String())
	stuck := serverPort(t, stuckListener(t))

	svc := func(s string) *string { return &s }
	tg := localTarget(nil)
	for _, tc := range []struct {
		name    string
		a       *corev1.GRPCAction
		tg      *target
		timeout time.Duration
		want    Outcome
		msg     string
	}{
		{"serving, no service", &corev1.GRPCAction{Port: int32(port)}, nil, longTimeout, Success, "service healthy"},
		{"serving service", &corev1.GRPCAction{Port: int32(port), Service: svc("cache")}, nil, longTimeout, Success, "service healthy"},
		{"not serving", &corev1.GRPCAction{Port: int32(port), Service: svc("db")}, nil, longTimeout, Failure, `service unhealthy (responded with "NOT_SERVING")`},
		{"unknown service", &corev1.GRPCAction{Port: int32(port), Service: svc("nope")}, nil, longTimeout, Failure,
			"error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"},
		{"no health service", &corev1.GRPCAction{Port: int32(bare)}, nil, longTimeout, Failure,
			"this server does not implement the grpc health protocol (grpc.health.v1.Health): unknown service grpc.health.v1.Health"},
		{"rpc timeout", &corev1.GRPCAction{Port: int32(hanging)}, nil, shortTimeout, Failure, "timeout: health rpc did not complete within 100ms"},
		{"connect timeout", &corev1.GRPCAction{Port: int32(stuck)}, nil, shortTimeout, Failure, "~timeout: failed to connect service"},
		{"refused", &corev1.GRPCAction{Port: int32(closedPort(t))}, nil, longTimeout, Failure, "~error: failed to connect service at"},
		{"an HTTP/1 server", &corev1.GRPCAction{Port: int32(httpPort)}, nil, longTimeout, Failure, "~error: health rpc probe failed: "},
		{"no pod IP", &corev1.GRPCAction{Port: int32(port)}, &target{pod: testPod, container: tg.container}, longTimeout, Errored, "the pod has no IP yet"},
		{"bad port", &corev1.GRPCAction{Port: 0}, nil, longTimeout, Errored, "grpc port 0 is not from 1 to 65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tg
			if tc.tg != nil {
				target = *tc.tg
			}
			o := grpcProbe(t.Context(), tc.a, target, tc.timeout)
			checkObservation(t, o, tc.want, tc.msg)
		})
	}
	hang.mu.Lock()
	defer hang.mu.Unlock()
	if len(hang.ua) != 1 || hang.ua[0] != "kube-probe/"+KubeVersion {
		t.Errorf("the server saw User-Agent %q, want kube-probe/%s", hang.ua, KubeVersion)
	}
	if !hang.deadline {
		t.Errorf("the server saw no deadline; the probe sends grpc-timeout")
	}
}

func healthResponse(st healthpb.HealthCheckResponse_ServingStatus, extra []byte) []byte {
	m, err := proto.Marshal(&healthpb.HealthCheckResponse{Status: st})
	if err != nil {
		panic(err)
	}
	m = append(m, extra...)
	b := make([]byte, 5, 5+len(m))
	binary.BigEndian.PutUint32(b[1:], uint32(len(m)))
	return append(b, m...)
}

func TestDecodeHealthResponse(t *testing.T) {
	unknownField := protowire.AppendString(protowire.AppendTag(nil, 9, protowire.BytesType), "x")
	for _, tc := range []struct {
		name    string
		b       []byte
		want    uint64
		wantErr bool
	}{
		{"serving", healthResponse(healthpb.HealthCheckResponse_SERVING, nil), 1, false},
		{"not serving", healthResponse(healthpb.HealthCheckResponse_NOT_SERVING, nil), 2, false},
		{"unknown status (empty message)", healthResponse(healthpb.HealthCheckResponse_UNKNOWN, nil), 0, false},
		{"unknown fields skipped", healthResponse(healthpb.HealthCheckResponse_SERVING, unknownField), 1, false},
		{"short", []byte{0, 0, 0}, 0, true},
		{"compressed", append([]byte{1}, healthResponse(1, nil)[1:]...), 0, true},
		{"length too long", []byte{0, 0, 0, 0, 9, 8, 1}, 0, true},
		{"two messages", append(healthResponse(1, nil), healthResponse(1, nil)...), 0, true},
		{"truncated varint", []byte{0, 0, 0, 0, 2, 8, 0x80}, 0, true},
		{"bad tag", []byte{0, 0, 0, 0, 1, 0xff}, 0, true},
	} {
		got, err := decodeHealthResponse(tc.b)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: decodeHealthResponse(%x) = %d, %v; want %d, error %v", tc.name, tc.b, got, err, tc.want, tc.wantErr)
		}
	}
}

// FuzzDecodeHealthResponse: any bytes from the network decode or fail,
// and a status that decodes is what proto says it is.
func FuzzDecodeHealthResponse(f *testing.F) {
	f.Add(healthResponse(healthpb.HealthCheckResponse_SERVING, nil))
	f.Add(healthResponse(healthpb.HealthCheckResponse_NOT_SERVING, []byte{0x4a, 1, 'x'}))
	f.Add([]byte{0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeHealthResponse(b)
		if err != nil {
			return
		}
		var m healthpb.HealthCheckResponse
		if perr := proto.Unmarshal(b[5:], &m); perr == nil && int32(m.Status) != int32(st) {
			t.Errorf("decodeHealthResponse(%x) = %d, proto says %d", b, st, m.Status)
		}
	})
}

func TestGRPCTimeoutHeader(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "1000m"},
		{1500 * time.Microsecond, "2m"},
		{99999999 * time.Millisecond, "99999999m"},
		{100000 * time.Second, "100000S"},
		{(1<<31 - 1) * time.Second, "35791395M"},
	} {
		if g := grpcTimeout(tc.d); g != tc.want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", tc.d, g, tc.want)
		}
	}
}
