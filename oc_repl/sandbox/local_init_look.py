"""The evidence's part of a confined sandbox's first process (its program is this text, then local_init.py's): the
walk of the places the sandbox may write and the facts of files, for tasks/evidence.py. The first process runs them
inside, with the sandbox's own view, so a link the model left leads nowhere outside; it is not dumpable, and nothing
of the sandbox can change what it does. Answers too large for one message come back in a memfd.
"""

import marshal
import os
import stat

WALK_LIMIT = 200_000  # entries a walk lists at most
HEAD = 2048


def _in_memfd(data):
    fd = os.memfd_create("oc-repl-answer", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def walk(request, fds):
    """Every path under the `roots` (`skip` left out, links not followed): mode, size, device, inode, mtime, ctime.
    A walk stays on its root's filesystem: what is mounted inside a root is either a root of its own or a part of
    the host the sandbox sees read-only (the python oc-repl runs, under an in-memory /root), never a place to write."""
    skip = set(request.get("skip", []))
    pending = []
    for root in request["roots"]:
        if root in skip:
            continue
        try:
            pending.append((root, os.lstat(root).st_dev))
        except OSError:
            continue
    found = {}
    while pending and len(found) <= WALK_LIMIT:
        directory, device = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.path in skip:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[entry.path] = (st.st_mode, st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            if stat.S_ISDIR(st.st_mode) and st.st_dev == device:
                pending.append((entry.path, device))
    return {"overflow": len(found) > WALK_LIMIT}, [_in_memfd(marshal.dumps(found))]


def _facts(path, digest):
    try:
        st = os.lstat(path)
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    found = {"mode": st.st_mode, "size": st.st_size, "dev": st.st_dev, "ino": st.st_ino}
    found.update(mtime=st.st_mtime_ns, ctime=st.st_ctime_ns)
    if stat.S_ISLNK(st.st_mode):
        found.update(link=os.readlink(path), target=os.path.realpath(path))
    elif stat.S_ISREG(st.st_mode) and digest:
        import hashlib

        sha, md5, head = hashlib.sha256(), hashlib.md5(), b""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                while chunk := os.read(fd, 1 << 20):
                    head += chunk[: HEAD - len(head)] if len(head) < HEAD else b""
                    sha.update(chunk)
                    md5.update(chunk)
            finally:
                os.close(fd)
        except OSError as exc:
            return {**found, "error": exc.strerror or str(exc)}
        found.update(sha256=sha.hexdigest(), md5=md5.hexdigest(), head=head)
    return found


def facts(request, fds):
    """lstat of each path, and with `digest` a regular file's sha256, md5 and first bytes; a link's target."""
    found = {path: _facts(path, request.get("digest", True)) for path in request["paths"]}
    return {}, [_in_memfd(marshal.dumps(found))]
