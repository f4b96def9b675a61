package manifest

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

// testChecks returns a valid exec check and a valid HTTP check.
func testChecks() []HealthCheck {
	return []HealthCheck{
		{Name: "db", Namespace: "default", Pod: "db", Container: "postgres", Exec: []string{"pg_isready", "-q"}},
		{Name: "app", Namespace: "kube-system", Pod: "gateway-app", HTTP: &HTTPCheck{Port: 8080, Path: "/healthz?full=1"}, TimeoutSeconds: 10},
	}
}

// TestValidateHealthChecks checks each rule of a manifest's health checks.
func TestValidateHealthChecks(t *testing.T) {
	tests := []struct {
		name   string
		change func([]HealthCheck) []HealthCheck
		want   string // a substring of the error; "" for valid
	}{
		{"valid", func(h []HealthCheck) []HealthCheck { return h }, ""},
		{"none", func([]HealthCheck) []HealthCheck { return nil }, ""},
		{"max checks", func(h []HealthCheck) []HealthCheck {
			for i := len(h); i < MaxHealthChecks; i++ {
				c := h[0]
				c.Name = "c" + strings.Repeat("x", i)
				h = append(h, c)
			}
			return h
		}, ""},
		{"too many checks", func(h []HealthCheck) []HealthCheck {
			for i := len(h); i <= MaxHealthChecks; i++ {
				c := h[0]
				c.Name = "c" + strings.Repeat("x", i)
				h = append(h, c)
			}
			return h
		}, "health checks, want at most"},
		{"duplicate name", func(h []HealthCheck) []HealthCheck { h[1].Name = h[0].Name; return h }, "used twice"},
		{"bad name", func(h []HealthCheck) []HealthCheck { h[0].Name = "DB"; return h }, "DNS label"},
		{"empty name", func(h []HealthCheck) []HealthCheck { h[0].Name = ""; return h }, "DNS label"},
		{"no namespace", func(h []HealthCheck) []HealthCheck { h[0].Namespace = ""; return h }, "namespace"},
		{"namespace with dot", func(h []HealthCheck) []HealthCheck { h[0].Namespace = "a.b"; return h }, "namespace"},
		{"pod with dots", func(h []HealthCheck) []HealthCheck { h[0].Pod = "db.v1.x"; return h }, ""},
		{"pod with slash", func(h []HealthCheck) []HealthCheck { h[0].Pod = "default/db"; return h }, "pod"},
		{"pod with empty label", func(h []HealthCheck) []HealthCheck { h[0].Pod = "db..x"; return h }, "pod"},
		{"pod too long", func(h []HealthCheck) []HealthCheck { h[0].Pod = strings.Repeat("a.", 127); return h }, "pod"},
		{"no pod", func(h []HealthCheck) []HealthCheck { h[0].Pod = ""; return h }, "pod"},
		{"bad container", func(h []HealthCheck) []HealthCheck { h[0].Container = "Postgres"; return h }, "container"},
		{"default container", func(h []HealthCheck) []HealthCheck { h[0].Container = ""; return h }, ""},
		{"container for http", func(h []HealthCheck) []HealthCheck { h[1].Container = "app"; return h }, "container"},
		{"neither", func(h []HealthCheck) []HealthCheck { h[0].Exec = nil; return h }, "neither"},
		{"both", func(h []HealthCheck) []HealthCheck { h[0].HTTP = h[1].HTTP; return h }, "both"},
		{"empty exec", func(h []HealthCheck) []HealthCheck { h[0].Exec = []string{}; return h }, "0 arguments"},
		{"empty command", func(h []HealthCheck) []HealthCheck { h[0].Exec = []string{"", "x"}; return h }, "command is empty"},
		{"empty argument", func(h []HealthCheck) []HealthCheck { h[0].Exec = []string{"x", ""}; return h }, ""},
		{"too many arguments", func(h []HealthCheck) []HealthCheck {
			h[0].Exec = make([]string, MaxExecArgs+1)
			h[0].Exec[0] = "x"
			return h
		}, "arguments"},
		{"arguments too long", func(h []HealthCheck) []HealthCheck {
			h[0].Exec = []string{"x", strings.Repeat("a", MaxExecBytes)}
			return h
		}, "bytes"},
		{"NUL in argument", func(h []HealthCheck) []HealthCheck { h[0].Exec = []string{"x", "a\x00b"}; return h }, "NUL"},
		{"argument not UTF-8", func(h []HealthCheck) []HealthCheck { h[0].Exec = []string{"x", "\xff"}; return h }, "UTF-8"},
		{"timeout max", func(h []HealthCheck) []HealthCheck { h[0].TimeoutSeconds = MaxHealthCheckTimeoutSeconds; return h }, ""},
		{"timeout over max", func(h []HealthCheck) []HealthCheck { h[0].TimeoutSeconds = MaxHealthCheckTimeoutSeconds + 1; return h }, "timeoutSeconds"},
		{"negative timeout", func(h []HealthCheck) []HealthCheck { h[0].TimeoutSeconds = -1; return h }, "timeoutSeconds"},
		{"port 0", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Port = 0; return h }, "port"},
		{"port too high", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Port = 65536; return h }, "port"},
		{"scheme HTTP", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Scheme = "HTTP"; return h }, ""},
		{"scheme HTTPS", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Scheme = "HTTPS"; return h }, "scheme"},
		{"scheme lower case", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Scheme = "http"; return h }, "scheme"},
		{"empty path", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Path = ""; return h }, "path"},
		{"relative path", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Path = "healthz"; return h }, "path"},
		{"absolute URL", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Path = "http://evil/"; return h }, "path"},
		{"path with space", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Path = "/a b"; return h }, "printable"},
		{"path with newline", func(h []HealthCheck) []HealthCheck { h[1].HTTP.Path = "/a\r\nHost: x"; return h }, "printable"},
		{"path too long", func(h []HealthCheck) []HealthCheck {
			h[1].HTTP.Path = "/" + strings.Repeat("a", MaxHTTPPathBytes)
			return h
		}, "path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testManifest(t)
			m.HealthChecks = tt.change(testChecks())
			err := m.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if ReasonOf(err) != Invalid || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want Invalid containing %q", err, tt.want)
			}
			if err := ValidateHealthChecks(m.HealthChecks); ReasonOf(err) != Invalid {
				t.Fatalf("ValidateHealthChecks() = %v, want Invalid", err)
			}
		})
	}
}

// TestHealthCheckTimeout checks the default and a given timeout.
func TestHealthCheckTimeout(t *testing.T) {
	h := testChecks()
	if got := h[0].Timeout(); got != DefaultHealthCheckTimeout {
		t.Errorf("Timeout() = %v, want the default %v", got, DefaultHealthCheckTimeout)
	}
	if got := h[1].Timeout(); got != 10*time.Second {
		t.Errorf("Timeout() = %v, want 10s", got)
	}
}

// TestHealthChecksSigned checks that health checks survive signing and
// verification as they were, and that the strict decoder refuses what a
// careless signer could let into them.
func TestHealthChecksSigned(t *testing.T) {
	pub, priv := testKey(1)
	m := testManifest(t)
	m.HealthChecks = testChecks()
	got, err := Verify(sign(t, m, priv), Trust{Keys: []ed25519.PublicKey{pub}}, VerifyOptions{Now: testNow})
	if err != nil {
		t.Fatalf("Verify = %v", err)
	}
	if len(got.HealthChecks) != 2 || strings.Join(got.HealthChecks[0].Exec, " ") != "pg_isready -q" ||
		*got.HealthChecks[1].HTTP != *m.HealthChecks[1].HTTP || got.HealthChecks[1].TimeoutSeconds != 10 {
		t.Fatalf("Verify returned checks %+v, want %+v", got.HealthChecks, m.HealthChecks)
	}

	good := string(mustJSON(t, m))
	tests := []struct {
		name string
		data string
		want Reason
	}{
		{"unknown check field", strings.Replace(good, `"pod":"db"`, `"pod":"db","shell":"true"`, 1), Malformed},
		{"unknown http field", strings.Replace(good, `"port":8080`, `"port":8080,"host":"evil"`, 1), Malformed},
		{"null exec", strings.Replace(good, `"exec":["pg_isready","-q"]`, `"exec":null`, 1), Malformed},
		{"exec as a string", strings.Replace(good, `"exec":["pg_isready","-q"]`, `"exec":"pg_isready -q"`, 1), Malformed},
		{"null http", strings.Replace(good, `"http":{`, `"http":null,"x":{`, 1), Malformed},
		{"null checks", strings.Replace(good, `"healthChecks":[`, `"healthChecks":null,"x":[`, 1), Malformed},
		{"port as a string", strings.Replace(good, `"port":8080`, `"port":"8080"`, 1), Malformed},
		{"too many arguments", strings.Replace(good, `"exec":["pg_isready","-q"]`, `"exec":[`+strings.Repeat(`"a",`, MaxExecArgs)+`"a"]`, 1), TooLarge},
		{"too many checks", strings.Replace(good, `"healthChecks":[`, `"healthChecks":[`+strings.Repeat(`{},`, MaxHealthChecks), 1), TooLarge},
		{"invalid check", strings.Replace(good, `"path":"/healthz?full=1"`, `"path":"healthz"`, 1), Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(good, `"healthChecks":[`) {
				t.Fatalf("the manifest's JSON has no healthChecks: %s", good)
			}
			got, err := DecodeManifest([]byte(tt.data))
			if ReasonOf(err) != tt.want || got != nil {
				t.Fatalf("DecodeManifest() = %v, %v, want reason %s", got, err, tt.want)
			}
		})
	}
}
