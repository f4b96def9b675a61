package containerd

// The user and groups of a container's process, resolved from the image's
// /etc/passwd and /etc/group as containerd's CRI plugin resolves them. The
// agent does it itself rather than with containerd's oci.WithUser,
// WithUserID and WithAdditionalGIDs: those read the root filesystem
// through containerd's internal/fsview, which imports text/template, and
// text/template's method lookup by name makes the linker keep every
// exported method of every type in outpost-edge (test/arch checks that it
// stays out).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/moby/sys/user"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/limitread"
)

// maxUserFile bounds the size of the image's /etc/passwd and /etc/group
// that are read; real ones are a few KiB.
const maxUserFile = 1 << 20

// maxID is the highest uid or gid a container may have: runc's limit,
// which containerd keeps too.
const maxID = math.MaxInt32

var (
	// errNoUser is returned for a user name (or the uid of a user whose
	// groups are looked up) that the image's /etc/passwd does not have.
	errNoUser = errors.New("no such user in the image's /etc/passwd")
	// errNoGroup is returned for a group name that the image's
	// /etc/group does not have.
	errNoGroup = errors.New("no such group in the image's /etc/group")
)

// userDB is what an image's /etc/passwd and /etc/group hold. A file that
// could not be read keeps its error (one that is fs.ErrNotExist for a
// missing file) for the lookups that need it: as in containerd, a file
// nobody needs is no error.
type userDB struct {
	users     []user.User
	usersErr  error
	groups    []user.Group
	groupsErr error
}

// userByName returns the first user named name.
func (db *userDB) userByName(name string) (user.User, error) {
	return db.findUser(func(u user.User) bool { return u.Name == name })
}

// userByID returns the first user of uid.
func (db *userDB) userByID(uid int) (user.User, error) {
	return db.findUser(func(u user.User) bool { return u.Uid == uid })
}

// findUser returns the first user of /etc/passwd that match accepts.
func (db *userDB) findUser(match func(user.User) bool) (user.User, error) {
	if db.usersErr != nil {
		return user.User{}, db.usersErr
	}
	i := slices.IndexFunc(db.users, match)
	if i < 0 {
		return user.User{}, errNoUser
	}
	return db.users[i], nil
}

// groupByName returns the gid of the first group named name.
func (db *userDB) groupByName(name string) (int, error) {
	if db.groupsErr != nil {
		return 0, db.groupsErr
	}
	i := slices.IndexFunc(db.groups, func(g user.Group) bool { return g.Name == name })
	if i < 0 {
		return 0, errNoGroup
	}
	return db.groups[i].Gid, nil
}

// processUser returns the user and groups a container's process runs as,
// as containerd's CRI plugin sets them, from imageUser (the image's USER:
// user, uid, user:group, uid:gid, uid:group or user:gid), the container's
// runAsUser, runAsGroup and supplementalGroups, and the image's users and
// groups in db. No I/O.
//
// runAsUser replaces the image's user, and its primary group is the
// user's in /etc/passwd, or 0 without an entry; runAsGroup replaces the
// primary group (also of the image's user, where CRI refuses runAsGroup
// without runAsUser). A user name, or a group name, that the image does
// not have is an error; a uid is not. The additional groups are the
// primary group, the groups /etc/group lists the user in, and
// supplementalGroups.
func processUser(db *userDB, imageUser string, runAsUser, runAsGroup *int64, supplemental []int64) (specs.User, error) {
	var uid, gid uint32
	name := "0" // whose groups /etc/group lists
	switch {
	case runAsUser != nil:
		u, err := checkID("runAsUser", *runAsUser)
		if err != nil {
			return specs.User{}, err
		}
		if uid, gid, err = userOfID(db, int(u)); err != nil {
			return specs.User{}, err
		}
		name = strconv.FormatInt(*runAsUser, 10)
	case imageUser != "":
		var err error
		if uid, gid, err = userOfImage(db, imageUser); err != nil {
			return specs.User{}, fmt.Errorf("image user %q: %w", imageUser, err)
		}
		if u, _, _ := strings.Cut(imageUser, ":"); u != "" {
			name = u
		}
	}
	if runAsGroup != nil {
		g, err := checkID("runAsGroup", *runAsGroup)
		if err != nil {
			return specs.User{}, err
		}
		gid = g
	}
	gids, err := groupsOf(db, name)
	if err != nil {
		return specs.User{}, fmt.Errorf("groups of user %q: %w", name, err)
	}
	additional := []uint32{gid}
	add := func(g uint32) {
		if !slices.Contains(additional, g) {
			additional = append(additional, g)
		}
	}
	for _, g := range gids {
		add(g)
	}
	for _, g := range supplemental {
		id, err := checkID("supplementalGroups", g)
		if err != nil {
			return specs.User{}, err
		}
		add(id)
	}
	return specs.User{UID: uid, GID: gid, AdditionalGids: additional}, nil
}

// checkID returns id as a uid or gid, or an error naming field if it is
// out of range.
func checkID(field string, id int64) (uint32, error) {
	if id < 0 || id > maxID {
		return 0, fmt.Errorf("%s %d: out of range 0 to %d", field, id, maxID)
	}
	return uint32(id), nil
}

// userOfID returns uid with its primary group in /etc/passwd, or 0 if the
// image has no /etc/passwd or no entry for uid (containerd's WithUserID).
func userOfID(db *userDB, uid int) (uint32, uint32, error) {
	u, err := db.userByID(uid)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoUser):
		return uint32(uid), 0, nil
	case err != nil:
		return 0, 0, err
	}
	return uint32(u.Uid), uint32(u.Gid), nil
}

// userOfImage returns the uid and gid of an image's USER (containerd's
// WithUser): a name is looked up in /etc/passwd, and its primary group
// comes with it; a uid alone is as userOfID; of user:group, each part is a
// number or a name, looked up in /etc/passwd or /etc/group.
func userOfImage(db *userDB, s string) (uint32, uint32, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 2 {
		return 0, 0, errors.New("want user, uid, user:group or uid:gid")
	}
	uid, uname, err := parseID(parts[0], "uid")
	if err != nil {
		return 0, 0, err
	}
	if len(parts) == 1 {
		if uname == "" {
			return userOfID(db, int(uid))
		}
		u, err := db.userByName(uname)
		if err != nil {
			return 0, 0, err
		}
		return uint32(u.Uid), uint32(u.Gid), nil
	}
	gid, gname, err := parseID(parts[1], "gid")
	if err != nil {
		return 0, 0, err
	}
	if uname != "" {
		u, err := db.userByName(uname)
		if err != nil {
			return 0, 0, err
		}
		uid = uint32(u.Uid)
	}
	if gname != "" {
		g, err := db.groupByName(gname)
		if err != nil {
			return 0, 0, fmt.Errorf("group %q: %w", gname, err)
		}
		gid = uint32(g)
	}
	return uid, gid, nil
}

// parseID returns s as an id, or as a name if it is not a number (what of
// "" is a name too, which no lookup is made for: as in containerd, a
// missing part of user:group is 0).
func parseID(s, what string) (uint32, string, error) {
	n, err := strconv.Atoi(s)
	switch {
	case errors.Is(err, strconv.ErrRange) || err == nil && (n < 0 || n > maxID):
		return 0, "", fmt.Errorf("%s out of range", what)
	case err != nil:
		return 0, s, nil
	}
	return uint32(n), "", nil
}

// groupsOf returns the gids of the groups /etc/group lists name (a user
// name, or the uid of one in /etc/passwd) in, but for the group of the
// same name (containerd's WithAdditionalGIDs). Without /etc/passwd or
// /etc/group, or an entry of the uid, there are none.
func groupsOf(db *userDB, name string) ([]uint32, error) {
	if uid, err := strconv.Atoi(name); err == nil {
		u, err := db.userByID(uid)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoUser):
			return nil, nil
		case err != nil:
			return nil, err
		}
		name = u.Name
	}
	if errors.Is(db.groupsErr, fs.ErrNotExist) {
		return nil, nil
	} else if db.groupsErr != nil {
		return nil, db.groupsErr
	}
	var gids []uint32
	for _, g := range db.groups {
		if g.Name != name && slices.Contains(g.List, name) {
			gids = append(gids, uint32(g.Gid))
		}
	}
	return gids, nil
}

// withUser sets the process's user and groups by processUser, reading the
// image's /etc/passwd and /etc/group from the container's snapshot,
// mounted read-only for the time of the read. The container must have
// its snapshot (client.WithNewSnapshot comes first).
func withUser(c *runtime.ContainerSpec, imageUser string) oci.SpecOpts {
	return func(ctx context.Context, cl oci.Client, ctr *containers.Container, s *oci.Spec) error {
		if ctr.Snapshotter == "" || ctr.SnapshotKey == "" {
			return errors.New("the user of a container without a snapshot cannot be resolved")
		}
		mounts, err := cl.SnapshotService(ctr.Snapshotter).Mounts(ctx, ctr.SnapshotKey)
		if err != nil {
			return fmt.Errorf("mounts of snapshot %s: %w", ctr.SnapshotKey, err)
		}
		var db userDB
		err = mount.WithReadonlyTempMount(ctx, mounts, func(dir string) error {
			root, err := os.OpenRoot(dir)
			if err != nil {
				return err
			}
			defer root.Close()
			db = readUserDB(root)
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the image's users: %w", err)
		}
		u, err := processUser(&db, imageUser, c.RunAsUser, c.RunAsGroup, c.SupplementalGroups)
		if err != nil {
			return err
		}
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.User.UID, s.Process.User.GID, s.Process.User.AdditionalGids = u.UID, u.GID, u.AdditionalGids
		return nil
	}
}

// readUserDB reads etc/passwd and etc/group of the root filesystem root.
func readUserDB(root *os.Root) userDB {
	var db userDB
	db.users, db.usersErr = readUserFile(root, "etc/passwd", user.ParsePasswd)
	db.groups, db.groupsErr = readUserFile(root, "etc/group", user.ParseGroup)
	return db
}

// readUserFile parses the file name of root, a regular file of at most
// maxUserFile bytes. Symbolic links are followed as inside the container,
// where root is "/", and never out of root.
func readUserFile[T any](root *os.Root, name string, parse func(io.Reader) ([]T, error)) ([]T, error) {
	p, err := resolveInRoot(root, name)
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", name, err)
	}
	f, err := root.Open(p)
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("/%s is not a regular file", name)
	}
	b, err := limitread.All(f, maxUserFile)
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", name, err)
	}
	out, err := parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", name, err)
	}
	return out, nil
}

// maxLinks bounds the symbolic links resolveInRoot follows, as Linux's
// MAXSYMLINKS.
const maxLinks = 40

// resolveInRoot returns name (relative to root) with its symbolic links
// resolved as inside a container whose "/" is root: an absolute target
// starts again at root, and ".." stops there.
func resolveInRoot(root *os.Root, name string) (string, error) {
	var done []string // components resolved, none a link
	todo := strings.Split(name, "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		p := path.Join(path.Join(done...), c)
		fi, err := root.Lstat(p)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if links++; links > maxLinks {
			return "", syscall.ELOOP
		}
		target, err := root.Readlink(p)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = done[:0]
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}
