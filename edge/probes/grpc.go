package probes

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
)

// The gRPC probe speaks just enough gRPC for one unary call of
// grpc.health.v1.Health/Check over HTTP/2 without TLS, as kubelet's does
// (no credentials), through net/http: the edge binary links no gRPC
// library for it.

// maxGRPCResponse bounds the body of a health check response read: one
// message with a 5-byte prefix; a HealthCheckResponse is a few bytes.
const maxGRPCResponse = 5 + 1<<10

// Health status values of grpc.health.v1.HealthCheckResponse.
const healthServing = 1

var healthStatusNames = map[uint64]string{0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}

// gRPC status codes the probe words.
const (
	codeDeadlineExceeded = 4
	codeUnimplemented    = 12
)

var grpcCodeNames = []string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
	"Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
	"Unauthenticated",
}

// rpcError is a call's non-OK gRPC status.
type rpcError struct {
	code    int
	message string
}

func (e *rpcError) Error() string {
	name := "Code(" + strconv.Itoa(e.code) + ")"
	if e.code >= 0 && e.code < len(grpcCodeNames) {
		name = grpcCodeNames[e.code]
	}
	return fmt.Sprintf("rpc error: code = %s desc = %s", name, e.message)
}

func grpcProbe(ctx context.Context, g *corev1.GRPCAction, t target, timeout time.Duration) Observation {
	if g.Port < 1 || g.Port > 65535 {
		return Observation{Errored, fmt.Sprintf("grpc port %d is not from 1 to 65535", g.Port)}
	}
	addr, err := hostPort("", int(g.Port), t)
	if err != nil {
		return Observation{Errored, err.Error()}
	}
	var service string
	if g.Service != nil {
		service = *g.Service
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dial(ctx, addr, 0) // ctx bounds it
	if err != nil {
		if ne, ok := errors.AsType[net.Error](err); errors.Is(ctx.Err(), context.DeadlineExceeded) || ok && ne.Timeout() {
			return Observation{Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %v", addr, timeout, err)}
		}
		return Observation{Failure, fmt.Sprintf("error: failed to connect service at %q: %v", addr, err)}
	}
	status, err := healthCheck(ctx, conn, addr, service, timeout)
	var re *rpcError
	switch {
	case errors.As(err, &re) && re.code == codeUnimplemented:
		return Observation{Failure, "this server does not implement the grpc health protocol (grpc.health.v1.Health): " + re.message}
	case errors.As(err, &re) && re.code == codeDeadlineExceeded, err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Observation{Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)}
	case err != nil:
		return Observation{Failure, "error: health rpc probe failed: " + err.Error()}
	case status != healthServing:
		return Observation{Failure, fmt.Sprintf("service unhealthy (responded with %q)", healthStatusName(status))}
	}
	return Observation{Success, "service healthy"}
}

func healthStatusName(s uint64) string {
	if n, ok := healthStatusNames[s]; ok {
		return n
	}
	return strconv.FormatUint(s, 10)
}

// healthCheck calls grpc.health.v1.Health/Check for service on conn, which
// it closes, and returns the status the server answered.
func healthCheck(ctx context.Context, conn net.Conn, addr, service string, timeout time.Duration) (uint64, error) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	handed := false
	tr := &http.Transport{
		Protocols:              &protos,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: maxHeaderBytes,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if handed {
				return nil, errors.New("connection already used")
			}
			handed = true
			return conn, nil
		},
	}
	defer tr.CloseIdleConnections()
	defer conn.Close()

	var msg []byte
	if service != "" {
		msg = protowire.AppendTag(msg, 1, protowire.BytesType)
		msg = protowire.AppendString(msg, service)
	}
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/grpc.health.v1.Health/Check", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("User-Agent", "kube-probe/"+KubeVersion)
	req.Header.Set("Grpc-Timeout", grpcTimeout(timeout))
	res, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("the server answered with HTTP status %d", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/grpc") {
		return 0, fmt.Errorf("the server answered with content type %q, not gRPC", ct)
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxGRPCResponse+1))
	if err != nil {
		return 0, fmt.Errorf("read response: %w", err)
	}
	if len(b) > maxGRPCResponse {
		return 0, fmt.Errorf("response is over %d bytes", maxGRPCResponse)
	}
	// A status comes in the trailers, or in the headers of a response
	// that has no body ("trailers-only").
	h := res.Trailer
	if h.Get("Grpc-Status") == "" {
		h = res.Header
	}
	code, err := strconv.Atoi(h.Get("Grpc-Status"))
	if err != nil {
		return 0, fmt.Errorf("response has no valid grpc-status: %q", h.Get("Grpc-Status"))
	}
	if code != 0 {
		m := h.Get("Grpc-Message")
		if u, err := url.PathUnescape(m); err == nil {
			m = u
		}
		return 0, &rpcError{code: code, message: m}
	}
	return decodeHealthResponse(b)
}

// decodeHealthResponse returns the status of the one length-prefixed,
// uncompressed grpc.health.v1.HealthCheckResponse that b holds.
func decodeHealthResponse(b []byte) (uint64, error) {
	if len(b) < 5 {
		return 0, fmt.Errorf("response message is %d bytes, shorter than its prefix", len(b))
	}
	if b[0] != 0 {
		return 0, errors.New("response message is compressed, which was not asked for")
	}
	if n := binary.BigEndian.Uint32(b[1:5]); uint64(n) != uint64(len(b)-5) {
		return 0, fmt.Errorf("response message says %d bytes, has %d", n, len(b)-5)
	}
	b = b[5:]
	var status uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("decode response: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, fmt.Errorf("decode response status: %w", protowire.ParseError(n))
			}
			status, b = v, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, fmt.Errorf("decode response field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return status, nil
}

// grpcTimeout words d as a grpc-timeout header value: at most 8 digits and
// a unit.
func grpcTimeout(d time.Duration) string {
	const maxDigits = 99999999
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{"m", time.Millisecond}, {"S", time.Second}, {"M", time.Minute}} {
		if v := (d + u.d - 1) / u.d; v <= maxDigits {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return strconv.FormatInt(int64(min((d+time.Hour-1)/time.Hour, maxDigits)), 10) + "H"
}
