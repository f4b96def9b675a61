package webhookclient

import (
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// server is a TLS webhook on loopback answering code and body, with the
// PEM of its certificate.
func server(t *testing.T, code int, body string) (*httptest.Server, []byte) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || r.URL.Query().Get("timeout") != "5s" {
			http.Error(w, "bad request "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
			return
		}
		in, _ := io.ReadAll(r.Body)
		w.WriteHeader(code)
		io.WriteString(w, strings.ReplaceAll(body, "$IN", string(in)))
	}))
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func TestPost(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, body string
		code       int
		max        int64
		want, err  string
	}{
		{"ok", `{"echo":$IN}`, 200, 100, `{"echo":{"a":1}}`, ""},
		{"too large", `{"echo":$IN}`, 200, 10, "", "larger than 10 bytes"},
		{"status", `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no way","reason":"Forbidden","code":403}`, 403, 1000, "", "no way"},
		{"text", `oops`, 500, 1000, "", "oops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, ca := server(t, tc.code, tc.body)
			u := srv.URL + "/convert"
			c, err := New(Config{URL: &u, CABundle: ca}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := c.Post(ctx, 5*time.Second, []byte(`{"a":1}`), tc.max)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Post = %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Post = %q, %v; want an error with %q", got, err, tc.err)
			case string(got) != tc.want:
				t.Errorf("Post = %q, want %q", got, tc.want)
			}
			if tc.name == "status" && !apierrors.IsForbidden(err) {
				t.Errorf("a Status answer: error %v is not its Forbidden", err)
			}
		})
	}
}

func TestNewRefusals(t *testing.T) {
	bad := "http://[::1"
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"nothing", Config{}, "either service or URL"},
		{"bad url", Config{URL: &bad}, "Unparsable URL"},
		{"bad ca", Config{URL: new(string), CABundle: []byte("not pem")}, "unable to load root certificates"},
		{"service without dialer", Config{Service: &Service{Namespace: "ns", Name: "hook"}}, "service webhooks are not served"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg, nil); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("New = %v, want an error with %q", err, tc.err)
			}
		})
	}
}

// TestService: a Service's webhook is dialled through the dialer and its
// certificate checked for NAME.NAMESPACE.svc.
func TestService(t *testing.T) {
	srv, ca := server(t, 200, `$IN`)
	var dialled string
	dial := func(ctx context.Context, ns, name string, port int32) (net.Conn, error) {
		dialled = ns + "/" + name
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}
	path := "/convert"
	c, err := New(Config{Service: &Service{Namespace: "ns", Name: "hook", Path: &path}, CABundle: ca}, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.URL != "https://hook.ns.svc:443/convert" {
		t.Errorf("URL = %q", c.URL)
	}
	// httptest's certificate names example.com, not hook.ns.svc.
	_, err = c.Post(context.Background(), 5*time.Second, []byte(`{}`), 100)
	if err == nil || !strings.Contains(err.Error(), "hook.ns.svc") || dialled != "ns/hook" {
		t.Errorf("Post = %v after dialling %q; want a certificate error naming hook.ns.svc", err, dialled)
	}
}

func FuzzStatusError(f *testing.F) {
	f.Add(500, []byte(`{"kind":"Status","status":"Failure","message":"m","code":500}`))
	f.Add(404, []byte("not found"))
	f.Fuzz(func(t *testing.T, code int, body []byte) {
		// An error whatever the answer, and its text bounded: a Status's
		// message is part of the body, any other body is cut short (and
		// quoted: an invalid byte takes four).
		err := StatusError(code, body)
		if err == nil {
			t.Fatalf("StatusError(%d, %q) = nil", code, body)
		}
		if limit := 4*min(len(body), maxErrorBody) + 600; len(err.Error()) > limit && !strings.Contains(string(body), "Status") {
			t.Fatalf("StatusError(%d, %d bytes) is %d bytes long", code, len(body), len(err.Error()))
		}
	})
}
