package podfiles

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestHosts(t *testing.T) {
	const head = "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n"
	for _, tc := range []struct {
		name      string
		pod       Pod
		nodeHosts string
		want      string
	}{
		{
			name: "pod network",
			pod:  Pod{Hostname: "web-0", IPs: []netip.Addr{netip.MustParseAddr("10.42.3.7")}},
			want: head + "10.42.3.7\tweb-0\n",
		},
		{
			name: "subdomain and aliases",
			pod: Pod{
				Hostname: "web-0", Domain: "web.shop.svc.cluster.local",
				IPs:         []netip.Addr{netip.MustParseAddr("10.42.3.7")},
				HostAliases: []HostAlias{{IP: "192.0.2.10", Hostnames: []string{"till", "till.local"}}, {IP: "192.0.2.11", Hostnames: []string{"scale"}}},
			},
			want: head + "10.42.3.7\tweb-0.web.shop.svc.cluster.local\tweb-0\n" +
				"\n# Entries added by HostAliases.\n192.0.2.10\ttill\ttill.local\n192.0.2.11\tscale\n",
		},
		{
			name:      "host network copies the node's file",
			pod:       Pod{Hostname: "gw-7", HostNetwork: true, HostAliases: []HostAlias{{IP: "192.0.2.10", Hostnames: []string{"till"}}}},
			nodeHosts: "127.0.0.1 localhost\n192.0.2.1 gw-7\n",
			want: "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.0.2.1 gw-7\n" +
				"\n# Entries added by HostAliases.\n192.0.2.10\ttill\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(Hosts(tc.pod, []byte(tc.nodeHosts))); got != tc.want {
				t.Errorf("Hosts(%+v) =\n%s\nwant\n%s", tc.pod, got, tc.want)
			}
		})
	}
}

func TestParseResolvConf(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    ResolvConf
		wantErr bool
	}{
		{
			in:   "# comment\nnameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch a.example. b.example\n; other\nsearch shop.example. .\noptions ndots:2\noptions timeout:1 attempts:3\ndomain ignored.example\n",
			want: ResolvConf{Nameservers: []string{"192.0.2.53", "192.0.2.54"}, Searches: []string{"shop.example"}, Options: []string{"timeout:1", "attempts:3"}},
		},
		{
			in:   "  nameserver\t10.0.0.2  extra\n\n",
			want: ResolvConf{Nameservers: []string{"10.0.0.2"}},
		},
		{in: "nameserver\n", wantErr: true},
		{in: "", want: ResolvConf{}},
	} {
		got, err := ParseResolvConf(strings.NewReader(tc.in))
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseResolvConf(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
		}
		if err == nil && !cmp.Equal(got, tc.want, cmpopts.EquateEmpty()) {
			t.Errorf("ParseResolvConf(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	big := strings.Repeat("# padding\n", MaxFileSize/10+1)
	if _, err := ParseResolvConf(strings.NewReader(big)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ParseResolvConf(%d bytes) = %v, want ErrTooLarge", len(big), err)
	}
}

func TestResolv(t *testing.T) {
	host := ResolvConf{Nameservers: []string{"192.0.2.53"}, Searches: []string{"shop.example"}, Options: []string{"ndots:2", "timeout:1"}}
	stub := ResolvConf{Nameservers: []string{"127.0.0.53"}, Searches: []string{"shop.example"}}
	cluster := Node{ClusterDNS: []netip.Addr{netip.MustParseAddr("10.43.0.10")}, ClusterDomain: "cluster.local"}
	many := func(n int, f func(i int) string) []string {
		var s []string
		for i := range n {
			s = append(s, f(i))
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		host     ResolvConf
		node     Node
		pod      Pod
		want     ResolvConf
		warnings int
	}{
		{
			name: "ClusterFirst without cluster DNS falls back to Default",
			host: host, pod: Pod{Namespace: "shop"},
			want: host, warnings: 1,
		},
		{
			name: "Default",
			host: host, pod: Pod{DNSPolicy: DNSDefault},
			want: host,
		},
		{
			name: "ClusterFirst with cluster DNS",
			host: host, node: cluster, pod: Pod{Namespace: "shop"},
			want: ResolvConf{
				Nameservers: []string{"10.43.0.10"},
				Searches:    []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "shop.example"},
				Options:     []string{"ndots:5"},
			},
		},
		{
			name: "host network ClusterFirst is Default, loopback kept",
			host: stub, node: cluster, pod: Pod{Namespace: "shop", HostNetwork: true},
			want: stub,
		},
		{
			name: "ClusterFirstWithHostNet uses the cluster",
			host: host, node: cluster, pod: Pod{Namespace: "kube-system", HostNetwork: true, DNSPolicy: DNSClusterFirstWithHostNet},
			want: ResolvConf{
				Nameservers: []string{"10.43.0.10"},
				Searches:    []string{"kube-system.svc.cluster.local", "svc.cluster.local", "cluster.local", "shop.example"},
				Options:     []string{"ndots:5"},
			},
		},
		{
			name: "loopback dropped on the pod network",
			host: ResolvConf{Nameservers: []string{"127.0.0.53", "192.0.2.53", "::1"}},
			pod:  Pod{DNSPolicy: DNSDefault},
			want: ResolvConf{Nameservers: []string{"192.0.2.53"}}, warnings: 1,
		},
		{
			name: "None with dnsConfig",
			host: host,
			pod:  Pod{DNSPolicy: DNSNone, DNSConfig: &DNSConfig{Nameservers: []string{"192.0.2.99"}, Searches: []string{"x.example"}, Options: []string{"ndots:1"}}},
			want: ResolvConf{Nameservers: []string{"192.0.2.99"}, Searches: []string{"x.example"}, Options: []string{"ndots:1"}},
		},
		{
			name: "dnsConfig merges: duplicates once, options by name",
			host: host,
			pod:  Pod{DNSPolicy: DNSDefault, DNSConfig: &DNSConfig{Nameservers: []string{"192.0.2.53", "192.0.2.54"}, Searches: []string{"shop.example", "b.example"}, Options: []string{"ndots:3", "edns0"}}},
			want: ResolvConf{Nameservers: []string{"192.0.2.53", "192.0.2.54"}, Searches: []string{"shop.example", "b.example"}, Options: []string{"ndots:3", "timeout:1", "edns0"}},
		},
		{
			name: "nameservers cut to three",
			host: ResolvConf{Nameservers: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"}},
			pod:  Pod{DNSPolicy: DNSDefault},
			want: ResolvConf{Nameservers: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}}, warnings: 1,
		},
		{
			name: "search paths cut to 32",
			host: ResolvConf{Searches: many(40, func(i int) string { return string(rune('a'+i%26)) + strings.Repeat("x", i) + ".example" })},
			pod:  Pod{DNSPolicy: DNSDefault},
			want: ResolvConf{Searches: many(32, func(i int) string { return string(rune('a'+i%26)) + strings.Repeat("x", i) + ".example" })}, warnings: 1,
		},
		{
			name: "over-long path dropped, line cut to 2048 characters",
			host: ResolvConf{Searches: append([]string{strings.Repeat("l", 254)}, many(20, func(i int) string { return strings.Repeat(string(rune('a'+i)), 200) })...)},
			pod:  Pod{DNSPolicy: DNSDefault},
			// ten 200-character paths and nine spaces are 2009 characters; an eleventh passes 2048
			want: ResolvConf{Searches: many(10, func(i int) string { return strings.Repeat(string(rune('a'+i)), 200) })}, warnings: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings := Resolv(tc.host, tc.node, tc.pod)
			if !cmp.Equal(got, tc.want, cmpopts.EquateEmpty()) {
				t.Errorf("Resolv = %+v, want %+v\n%s", got, tc.want, cmp.Diff(tc.want, got, cmpopts.EquateEmpty()))
			}
			if len(warnings) != tc.warnings {
				t.Errorf("Resolv warnings = %q, want %d", warnings, tc.warnings)
			}
		})
	}
}

func TestResolvConfBytes(t *testing.T) {
	rc := ResolvConf{Nameservers: []string{"10.43.0.10", "192.0.2.53"}, Searches: []string{"a.example", "b.example"}, Options: []string{"ndots:5"}}
	want := "search a.example b.example\nnameserver 10.43.0.10\nnameserver 192.0.2.53\noptions ndots:5\n"
	if got := string(rc.Bytes()); got != want {
		t.Errorf("Bytes() = %q, want %q", got, want)
	}
	back, err := ParseResolvConf(bytes.NewReader(rc.Bytes()))
	if err != nil || !cmp.Equal(back, rc) {
		t.Errorf("ParseResolvConf(Bytes()) = %+v, %v, want %+v", back, err, rc)
	}
}

func TestWrite(t *testing.T) {
	nodeDir := t.TempDir()
	resolv := filepath.Join(nodeDir, "resolv.conf")
	hosts := filepath.Join(nodeDir, "hosts")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nsearch shop.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	node := Node{HostsFile: hosts, ResolvConf: resolv}
	dir := filepath.Join(t.TempDir(), "pods", "uid-1", "etc")

	pod := Pod{Hostname: "web-0", Namespace: "shop", IPs: []netip.Addr{netip.MustParseAddr("10.42.3.7")}}
	f, err := Write(dir, node, pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Warnings) != 1 {
		t.Errorf("Write warnings = %q, want the fallback from ClusterFirst", f.Warnings)
	}
	check := func(path, want string) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("%s = %q, want %q", path, b, want)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
			t.Errorf("%s mode = %v, want 0644", path, st.Mode())
		}
	}
	check(f.Hostname, "web-0\n")
	check(f.ResolvConf, "search shop.example\nnameserver 192.0.2.53\n")
	check(f.Hosts, string(Hosts(pod, nil)))

	// A second write replaces the files in place; nothing else is left in dir.
	pod = Pod{Hostname: "gw-7", HostNetwork: true, DNSPolicy: DNSDefault}
	if _, err := Write(dir, node, pod); err != nil {
		t.Fatal(err)
	}
	check(f.Hostname, "gw-7\n")
	check(f.Hosts, "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n")
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{HostnameName, HostsName, ResolvConfName}; !slices.Equal(names, want) {
		t.Errorf("pod directory holds %v, want %v", names, want)
	}

	if _, err := Write(dir, Node{ResolvConf: filepath.Join(nodeDir, "missing")}, pod); err == nil {
		t.Error("Write with a missing resolver file succeeded")
	}
	if _, err := Write(dir, node, Pod{}); err == nil {
		t.Error("Write without a hostname succeeded")
	}
}

func FuzzParseResolvConf(f *testing.F) {
	f.Add("nameserver 192.0.2.53\nsearch a.example.\noptions ndots:5\n")
	f.Add("# c\nsearch .\nnameserver\n")
	f.Add(strings.Repeat("search a b c\n", 50))
	f.Fuzz(func(t *testing.T, in string) {
		rc, err := ParseResolvConf(strings.NewReader(in))
		if err != nil {
			return
		}
		// What it renders parses back to the same configuration, once the
		// pod's limits are applied to both.
		back, err := ParseResolvConf(bytes.NewReader(rc.Bytes()))
		if err != nil {
			t.Fatalf("ParseResolvConf(Bytes()) of %q: %v", in, err)
		}
		if !cmp.Equal(back.Nameservers, rc.Nameservers, cmpopts.EquateEmpty()) || !cmp.Equal(back.Options, rc.Options, cmpopts.EquateEmpty()) {
			t.Fatalf("round trip of %q: %+v, want %+v", in, back, rc)
		}
		got, _ := Resolv(rc, Node{}, Pod{DNSPolicy: DNSDefault})
		if len(got.Nameservers) > MaxNameservers || len(got.Searches) > MaxSearchPaths || len(strings.Join(got.Searches, " ")) > MaxSearchListChars {
			t.Fatalf("Resolv of %q broke the limits: %+v", in, got)
		}
	})
}
