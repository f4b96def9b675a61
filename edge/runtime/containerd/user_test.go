package containerd

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/limitread"
)

const (
	testPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
app:x:1000:1000:app:/home/app:/bin/sh
web:x:1001:1002:web:/home/web:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
`
	testGroup = `root:x:0:
daemon:x:1:root
wheel:x:10:root,app
app:x:1000:app
web:x:1002:
www-data:x:33:web,app
audio:x:29:web
nogroup:x:65534:
`
)

// rootfs returns a root filesystem in a temporary directory with files,
// name to content; a content starting with "->" makes a symbolic link to
// the rest.
func rootfs(t *testing.T, files map[string]string) *os.Root {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

func TestProcessUser(t *testing.T) {
	full := map[string]string{"etc/passwd": testPasswd, "etc/group": testGroup}
	noPasswd := map[string]string{"etc/group": testGroup}
	id := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name         string
		files        map[string]string
		image        string
		runAs, group *int64
		supplemental []int64
		want         specs.User
		wantErr      string // in the error, or "" for none
	}{
		{name: "no user is root with root's groups", files: full,
			want: specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0, 1, 10}}},
		{name: "by name", files: full, image: "app",
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 10, 33}}},
		{name: "by uid", files: full, image: "1001",
			want: specs.User{UID: 1001, GID: 1002, AdditionalGids: []uint32{1002, 33, 29}}},
		{name: "uid without an entry", files: full, image: "4242",
			want: specs.User{UID: 4242, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "uid:gid", files: full, image: "1000:33",
			want: specs.User{UID: 1000, GID: 33, AdditionalGids: []uint32{33, 10}}},
		{name: "name:groupname", files: full, image: "web:nogroup",
			want: specs.User{UID: 1001, GID: 65534, AdditionalGids: []uint32{65534, 33, 29}}},
		{name: "uid:groupname", files: full, image: "4242:audio",
			want: specs.User{UID: 4242, GID: 29, AdditionalGids: []uint32{29}}},
		{name: "name:gid", files: full, image: "app:7",
			want: specs.User{UID: 1000, GID: 7, AdditionalGids: []uint32{7, 10, 33}}},
		{name: "name without group", files: full, image: "app:",
			want: specs.User{UID: 1000, GID: 0, AdditionalGids: []uint32{0, 10, 33}}},
		{name: "group without user", files: full, image: ":33",
			want: specs.User{UID: 0, GID: 33, AdditionalGids: []uint32{33, 1, 10}}},
		{name: "missing passwd, numeric uid", files: noPasswd, image: "1000",
			want: specs.User{UID: 1000, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "missing passwd, no user", files: noPasswd,
			want: specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "missing passwd and group, uid:gid", files: map[string]string{}, image: "5:6",
			want: specs.User{UID: 5, GID: 6, AdditionalGids: []uint32{6}}},
		{name: "missing group: no groups of it", files: map[string]string{"etc/passwd": testPasswd}, image: "app",
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000}}},
		{name: "missing passwd, name", files: noPasswd, image: "app", wantErr: `image user "app": /etc/passwd: `},
		{name: "no such user", files: full, image: "mallory", wantErr: `image user "mallory": no such user in the image's /etc/passwd`},
		{name: "no such user with a group", files: full, image: "mallory:app", wantErr: `image user "mallory:app": no such user`},
		{name: "no such group", files: full, image: "app:staff", wantErr: `image user "app:staff": group "staff": no such group in the image's /etc/group`},
		{name: "uid out of range", files: full, image: "2147483648", wantErr: "uid out of range"},
		{name: "negative uid", files: full, image: "-1", wantErr: "uid out of range"},
		{name: "gid out of range", files: full, image: "1:99999999999999999999", wantErr: "gid out of range"},
		{name: "three parts", files: full, image: "a:b:c", wantErr: "want user, uid, user:group or uid:gid"},

		{name: "runAsUser takes its group from passwd", files: full, image: "app", runAs: id(1001),
			want: specs.User{UID: 1001, GID: 1002, AdditionalGids: []uint32{1002, 33, 29}}},
		{name: "runAsUser replaces an image user the image lacks", files: full, image: "mallory", runAs: id(1000),
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 10, 33}}},
		{name: "runAsUser without an entry", files: full, runAs: id(4242),
			want: specs.User{UID: 4242, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "runAsUser and runAsGroup", files: full, runAs: id(1000), group: id(3000), supplemental: []int64{2000},
			want: specs.User{UID: 1000, GID: 3000, AdditionalGids: []uint32{3000, 10, 33, 2000}}},
		{name: "runAsGroup alone replaces the image user's group", files: full, image: "web", group: id(3000),
			want: specs.User{UID: 1001, GID: 3000, AdditionalGids: []uint32{3000, 33, 29}}},
		{name: "supplementalGroups once each", files: full, image: "app", supplemental: []int64{33, 2000, 1000, 2000},
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 10, 33, 2000}}},
		{name: "runAsUser out of range", files: full, runAs: id(-1), wantErr: "runAsUser -1: out of range"},
		{name: "runAsGroup out of range", files: full, group: id(1 << 31), wantErr: "runAsGroup 2147483648: out of range"},
		{name: "supplementalGroups out of range", files: full, supplemental: []int64{-5}, wantErr: "supplementalGroups -5: out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := readUserDB(rootfs(t, tc.files))
			got, err := processUser(&db, tc.image, tc.runAs, tc.group, tc.supplemental)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("processUser(%q) = %+v, %v; want an error saying %q", tc.image, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.UID != tc.want.UID || got.GID != tc.want.GID || !slices.Equal(got.AdditionalGids, tc.want.AdditionalGids) {
				t.Fatalf("processUser(%q) = %+v, %v; want %+v", tc.image, got, err, tc.want)
			}
		})
	}
}

// TestUserFilesStayInRoot: the image's /etc/passwd and /etc/group are
// read with their symbolic links resolved inside the root filesystem, as
// the container sees them, never outside it.
func TestUserFilesStayInRoot(t *testing.T) {
	outside := t.TempDir()
	evil := "mallory:x:666:666::/:/bin/sh\n"
	if err := os.WriteFile(filepath.Join(outside, "passwd"), []byte(evil), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "group"), []byte("evil:x:666:root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		image string
		want  string // "" for no such user, "missing" for no /etc/passwd
	}{
		{"absolute link out", map[string]string{"etc/passwd": "->" + filepath.Join(outside, "passwd")}, "mallory", "missing"},
		{"relative link out", map[string]string{"etc/passwd": "->../../../../../../../../" + outside + "/passwd"}, "mallory", "missing"},
		{"directory link out", map[string]string{"etc": "->" + outside}, "mallory", "missing"},
		{"absolute link in", map[string]string{"etc/passwd": "->/usr/share/passwd", "usr/share/passwd": testPasswd}, "app", "1000"},
		{"relative link in", map[string]string{"etc/passwd": "->../usr/share/passwd", "usr/share/passwd": testPasswd}, "app", "1000"},
		{"dot-dot stops at root", map[string]string{"etc/passwd": "->../../../../usr/share/passwd", "usr/share/passwd": testPasswd}, "app", "1000"},
		{"link loop", map[string]string{"etc/passwd": "->/etc/passwd2", "etc/passwd2": "->/etc/passwd"}, "app", "loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := readUserDB(rootfs(t, tc.files))
			u, err := processUser(&db, tc.image, nil, nil, nil)
			switch tc.want {
			case "missing":
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("processUser(%q) = %+v, %v; want /etc/passwd missing, not the file outside the root", tc.image, u, err)
				}
			case "loop":
				if err == nil || !strings.Contains(err.Error(), "too many levels of symbolic links") {
					t.Errorf("processUser(%q) = %+v, %v; want a link loop error", tc.image, u, err)
				}
			default:
				if err != nil || u.UID != 1000 {
					t.Errorf("processUser(%q) = %+v, %v; want uid %s", tc.image, u, err, tc.want)
				}
			}
			// A uid is looked up the same way: the entry outside
			// is not found, and its groups are none.
			db = readUserDB(rootfs(t, tc.files))
			if u, err := processUser(&db, "666", nil, nil, nil); tc.want != "loop" && (err != nil || u.GID != 0 || len(u.AdditionalGids) != 1) {
				t.Errorf("processUser(666) = %+v, %v; want uid 666 with group 0 alone", u, err)
			}
		})
	}
}

// TestUserFileLimits: an /etc/passwd that is too big, or not a regular
// file, is an error for a lookup that needs it.
func TestUserFileLimits(t *testing.T) {
	big := strings.Repeat("u:x:1:1::/:/bin/sh\n", maxUserFile/19+1)
	db := readUserDB(rootfs(t, map[string]string{"etc/passwd": big, "etc/group": testGroup}))
	if _, err := processUser(&db, "u", nil, nil, nil); !errors.Is(err, limitread.ErrTooLarge) {
		t.Errorf("processUser with a %d-byte /etc/passwd = %v, want an error saying it is too large", len(big), err)
	}
	root := rootfs(t, map[string]string{"etc/group": testGroup})
	if err := root.Mkdir("etc/passwd", 0o755); err != nil {
		t.Fatal(err)
	}
	db = readUserDB(root)
	if _, err := processUser(&db, "app", nil, nil, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("processUser with a directory /etc/passwd = %v, want an error saying so", err)
	}
}

// TestImageUser: a container runs as the user its image names, found in
// the image's /etc/passwd through its snapshot, with runAsGroup over the
// user's group; no temporary mount is left behind.
func TestImageUser(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("users")
	named := sh("named", "id -u; id -g; id -G")
	named.Image = busyboxUser
	named.LogPath = filepath.Join(t.TempDir(), "0.log")
	if err := r.StartContainer(bg, p, named, 0); err != nil {
		t.Fatalf("StartContainer(image user nobody) = %v", err)
	}
	waitState(t, r, p, "named", runtime.StateExited)
	if got, want := logLines(t, named.LogPath), []string{"stdout:65534", "stdout:65534", "stdout:65534"}; !slices.Equal(got, want) {
		t.Errorf("id of image user nobody printed %q, want %q", got, want)
	}

	gid := int64(3000)
	grouped := named
	grouped.Name, grouped.RunAsGroup, grouped.SupplementalGroups = "grouped", &gid, []int64{42}
	grouped.LogPath = filepath.Join(t.TempDir(), "0.log")
	if err := r.StartContainer(bg, p, grouped, 0); err != nil {
		t.Fatalf("StartContainer(image user nobody, runAsGroup 3000) = %v", err)
	}
	waitState(t, r, p, "grouped", runtime.StateExited)
	if got, want := logLines(t, grouped.LogPath), []string{"stdout:65534", "stdout:3000", "stdout:3000 42"}; !slices.Equal(got, want) {
		t.Errorf("id of image user nobody with runAsGroup 3000 printed %q, want %q", got, want)
	}

	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), "containerd-mount") {
		t.Errorf("a temporary mount of a snapshot is left:\n%s", mounts)
	}
}
