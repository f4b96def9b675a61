package wire

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "write testdata/golden/ from the samples: only for the frames of a new capability version")

// golden is one pinned frame: a message as a peer of some capability
// version writes it (uncompressed), or, with object set, the encoding of
// an object that is no API object (a *PodTokens or a *MeshKeys).
type golden struct {
	name   string
	msg    Message
	object any
}

// encodeObject returns the encoding of a golden object.
func encodeObject(obj any) []byte {
	switch o := obj.(type) {
	case *PodTokens:
		return MarshalPodTokens(o)
	case *MeshKeys:
		return MarshalMeshKeys(o)
	}
	panic(fmt.Sprintf("golden object of type %T", obj))
}

// decodeObject decodes b as an object of the type of like.
func decodeObject(like any, b []byte) (any, error) {
	switch like.(type) {
	case *PodTokens:
		return UnmarshalPodTokens(b)
	case *MeshKeys:
		return UnmarshalMeshKeys(b)
	}
	panic(fmt.Sprintf("golden object of type %T", like))
}

// goldenFrames holds, by capability version, the frames that version
// added or changed. Their bytes in testdata/golden/v<N>.txt never change:
// a later build must still write and read them alike, so that a
// renumbered field or a changed meaning fails here (see testdata/sync.proto).
func goldenFrames() map[int][]golden {
	k := Key{Resource: ResourcePods, Namespace: "default", Name: "web-1"}
	return map[int][]golden{
		1: {
			{name: "error", msg: &Error{Code: CodeForbidden, Message: "node edge-1 may not write pod default/web-2"}},
			{name: "join-request", msg: &JoinRequest{CapabilityVersion: 1, Token: "abcdef.0123456789abcdef", NodeName: "edge-1", Site: "store-7", CSR: []byte{0x30, 0x82, 1, 2}}},
			{name: "join-response", msg: &JoinResponse{Certificate: []byte{1, 2, 3}, CA: []byte{4, 5, 6}}},
			{name: "hello", msg: &Hello{CapabilityVersion: 1, NodeName: "edge-1", LastRevision: 12345, AgentVersion: "v0.1.0"}},
			{name: "welcome", msg: &Welcome{CapabilityVersion: 1, HubRevision: 99999, SendInventory: true}},
			{name: "inventory", msg: &Inventory{Entries: []InventoryEntry{{Key: k, Revision: 7}, {Key: Key{Resource: ResourceNodes, Name: "edge-1"}, Revision: 8}}, More: true}},
			{name: "batch", msg: &Batch{Changes: []Change{
				{Op: OpPut, Key: k, Revision: 10, Object: []byte("k8s\x00pod")},
				{Op: OpDelete, Key: Key{Resource: ResourceSecrets, Namespace: "default", Name: "s"}, Revision: 11},
			}, Revision: 12}},
			{name: "ack", msg: &Ack{Revision: 12}},
			{name: "status-push", msg: &StatusPush{Items: []StatusItem{{Seq: 1, Kind: KindPodStatus, Key: k, Object: []byte("status")}}}},
			{name: "status-ack", msg: &StatusAck{Results: []StatusResult{{Seq: 1}, {Seq: 2, Code: CodeForbidden, Message: "no"}}}},
			{name: "renew-request", msg: &RenewRequest{CSR: []byte{9, 9}}},
			{name: "renew-response", msg: &RenewResponse{Certificate: []byte{8, 8}}},
			{name: "tunnel-open", msg: &TunnelOpen{Kind: "logs", Params: []Param{{Name: "pod", Value: "default/web-1"}}}},
			{name: "tunnel-reply", msg: &TunnelReply{}},
		},
		2: {
			{name: "error-retry-after", msg: &Error{Code: CodeUnavailable, Message: "too many failed joins", RetryAfter: 7500 * time.Millisecond}},
		},
		3: {
			{name: "hello-tokens", msg: &Hello{CapabilityVersion: 3, NodeName: "edge-1", LastRevision: 12345, AgentVersion: "v0.3.0", Tokens: []InventoryEntry{
				{Key: PodTokensKey("default", "0b5c7e6a-3f1d-4c2e-9a8b-1d2e3f4a5b6c"), Revision: 1796256000},
			}}},
			{name: "batch-podtokens", msg: &Batch{Changes: []Change{
				{Op: OpPut, Key: PodTokensKey("default", "0b5c7e6a-3f1d-4c2e-9a8b-1d2e3f4a5b6c"), Revision: 1796256000, Object: MarshalPodTokens(samplePodTokens())},
				{Op: OpDelete, Key: PodTokensKey("default", "7d1e0f2a-gone"), Revision: 12},
			}, Revision: 12}},
			{name: "podtokens-object", object: samplePodTokens()},
		},
		4: {
			{name: "usage", msg: sampleUsage()},
			{name: "usage-unchanged", msg: &Usage{Time: time.UnixMilli(1796256060123), Window: 15 * time.Second, Unchanged: true}},
		},
		5: {
			{name: "hello-meshkeys", msg: &Hello{CapabilityVersion: 5, NodeName: "edge-1", LastRevision: 12345, AgentVersion: "v0.5.0", Tokens: []InventoryEntry{
				{Key: PodTokensKey("default", "0b5c7e6a-3f1d-4c2e-9a8b-1d2e3f4a5b6c"), Revision: 1796256000},
				{Key: MeshKeysKey("store-7"), Revision: 1796428800},
			}}},
			{name: "batch-meshkeys", msg: &Batch{Changes: []Change{
				{Op: OpPut, Key: MeshKeysKey("store-7"), Revision: 1796428800, Object: MarshalMeshKeys(sampleMeshKeys())},
				{Op: OpDelete, Key: MeshKeysKey("store-6"), Revision: 12},
			}, Revision: 12}},
			{name: "meshkeys-object", object: sampleMeshKeys()},
			// Relay, added within version 5: older builds skip field 6.
			{name: "usage-relay", msg: sampleRelayUsage()},
		},
		6: {
			{name: "artifact-request-manifest", msg: &ArtifactRequest{Release: "agent-1-4-0"}},
			{name: "artifact-request", msg: sampleArtifactRequest()},
			{name: "artifact-reply", msg: &ArtifactReply{Mode: ArtifactDelta, Size: 5 << 20, ChunkSize: 256 << 10}},
			{name: "artifact-reply-envelope", msg: &ArtifactReply{Envelope: []byte(`{"payloadType":"x"}`)}},
			{name: "artifact-reply-refused", msg: &ArtifactReply{Code: CodeNotFound, Message: "release agent-1-4-0 has no component gps"}},
			{name: "artifact-chunk", msg: &ArtifactChunk{Index: 7, Data: []byte{0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3}, Delta: true}},
		},
	}
}

func (g golden) encode(t *testing.T) []byte {
	if g.object != nil {
		return encodeObject(g.object)
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.SetCompression(false)
	if err := w.Write(g.msg); err != nil {
		t.Fatalf("Write(%s) = %v", g.name, err)
	}
	return buf.Bytes()
}

func TestGoldenFrames(t *testing.T) {
	for v, frames := range goldenFrames() {
		if v > CapabilityVersion {
			t.Fatalf("golden frames of version %d, newer than this build's %d", v, CapabilityVersion)
		}
		path := filepath.Join("testdata", "golden", fmt.Sprintf("v%d.txt", v))
		if *rewrite {
			var b strings.Builder
			fmt.Fprintf(&b, "# Frames of capability version %d, uncompressed, in hex (see sync.proto).\n", v)
			for _, g := range frames {
				fmt.Fprintf(&b, "%s %x\n", g.name, g.encode(t))
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want := readGolden(t, path)
		for _, g := range frames {
			pinned, ok := want[g.name]
			if !ok {
				t.Errorf("%s: no frame %q; run the test with -rewrite for a new version", path, g.name)
				continue
			}
			if got := g.encode(t); !bytes.Equal(got, pinned) {
				t.Errorf("%s %s: encodes as %x, pinned %x", path, g.name, got, pinned)
			}
			// The pinned bytes still decode as the message.
			if g.object != nil {
				got, err := decodeObject(g.object, pinned)
				if err != nil || !reflect.DeepEqual(got, g.object) {
					t.Errorf("%s %s: decodes as %+v, %v; want %+v", path, g.name, got, err, g.object)
				}
				continue
			}
			got, err := NewReader(bytes.NewReader(pinned), 0).Read()
			if err != nil || !reflect.DeepEqual(got, g.msg) {
				t.Errorf("%s %s: decodes as %#v, %v; want %#v", path, g.name, got, err, g.msg)
			}
		}
	}
}

// TestOlderHello: a hub reads the Hello of a version 2 edge, which lists
// no tokens, and a version 2 build skips the Tokens of a version 3 Hello.
func TestOlderHello(t *testing.T) {
	v1 := readGolden(t, filepath.Join("testdata", "golden", "v1.txt"))["hello"]
	m, err := NewReader(bytes.NewReader(v1), 0).Read()
	if err != nil || m.(*Hello).Tokens != nil {
		t.Fatalf("version 1 hello = %#v, %v; want no tokens", m, err)
	}
	v3 := readGolden(t, filepath.Join("testdata", "golden", "v3.txt"))["hello-tokens"]
	body := v3[uvarintLen(uint64(len(v3)))+2:]
	// What a build without field 5 reads: the fields it knows.
	var known Hello
	err = eachField(body, func(f field) (err error) {
		switch f.num {
		case 1:
			known.CapabilityVersion, err = f.uint32()
		case 2:
			known.NodeName, err = f.str()
		case 3:
			known.LastRevision, err = f.revision()
		case 4:
			known.AgentVersion, err = f.str()
		}
		return err
	})
	if err != nil || known.NodeName != "edge-1" || known.LastRevision != 12345 {
		t.Fatalf("version 3 hello read by version 2 fields = %+v, %v", known, err)
	}
}

func readGolden(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v; run the test with -rewrite for a new version", err)
	}
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hx, ok := strings.Cut(line, " ")
		b, err := hex.DecodeString(hx)
		if !ok || err != nil {
			t.Fatalf("%s: bad line %q", path, line)
		}
		out[name] = b
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
