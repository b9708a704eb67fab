package file

import (
	"io/fs"
	"syscall"
)

// sameInodeState compares what a chown, a chmod and back, a new hard link,
// an extended attribute or an ACL changes, and a user cannot set back: the
// inode's change time. The owner and link count say the same more plainly.
func sameInodeState(a, b fs.FileInfo) bool {
	sa, ok := a.Sys().(*syscall.Stat_t)
	sb, okb := b.Sys().(*syscall.Stat_t)
	return ok && okb && sa.Ctim == sb.Ctim && sa.Uid == sb.Uid && sa.Gid == sb.Gid && sa.Nlink == 1 && sb.Nlink == 1
}
