"""The first program of an isolated sandbox: ``unshare [--user --map-root-user] --mount --pid
--net --ipc --uts --fork --kill-child -- python -I -S -B code_jail.py ROOT WORK HARNESS UID USERNS BINDS --
HARNESS-COMMAND...``,
run as root (of the host, or, for a grader that is not root, of a user namespace of its own).

Not imported by slime. In the fresh namespaces `unshare` made (its own mounts, process ids,
an empty network, its own IPC and host name), it

1. builds a new root on a small tmpfs: the interpreter's directories (``/usr``, ``/lib*``, the
   Python prefix) bound read-only, no set-uid bits, the null/zero/random devices, the
   harness, and the scratch directory (the only writable place) at its own path; nothing
   else of the host exists there: no other files, no ``/proc``, no ``/tmp``;
2. locks that root (read-only), enters it (``chroot``), and gives the scratch directory
   to the sandbox's user id;
3. drops root for good: no supplementary groups, that user id for every uid and gid
   (which clears every capability; in a user namespace, a nested one that maps that id to
   the grader's user: `become_user_in_new_namespace`), and ``no_new_privs`` (nothing it
   runs can gain any);
4. becomes the harness (``exec``), as process 1 of its namespace: when it ends, the kernel
   ends everything it started.

A program that slips past the harness's audit hooks is still that user, alone in that
root, with no network and no process of the grader in sight; a chrooted process cannot
make a user namespace, and without capabilities it cannot mount, unmount, chroot or
change ids. Exit status 122: this setup failed (a sandbox fault).
"""

import ctypes
import functools
import os
import sys

SETUP_FAILED = 122
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWUSER = 0x10000000
# statvfs flags a remount must keep (the kernel refuses to clear them inside a user namespace) → mount flags
_KEPT_FLAGS = {2: 2, 4: 4, 8: 8, 1024: 1024, 2048: 2048, 4096: 1 << 21}
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")


def main() -> None:
    plan = parse(sys.argv[1 : sys.argv.index("--")])
    command = sys.argv[sys.argv.index("--") + 1 :]
    try:
        build_root(plan)
        enter(plan)
    except OSError as error:
        sys.stderr.write(f"sandbox setup failed: {error}\n")
        sys.exit(SETUP_FAILED)
    os.execv(command[0], command)


def parse(args: list[str]) -> dict:
    """The plan from the command line (json would import `re`, a tenth of this program's time)."""
    root, work, harness, uid, user_namespace, binds = args
    return {
        "root": root,
        "work": work,
        "harness": harness,
        "uid": int(uid),
        "user_namespace": user_namespace == "1",
        "binds": binds.split(os.pathsep),
    }


def build_root(plan: dict) -> None:
    """Step 1 and the read-only lock of step 2."""
    root = plan["root"]
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in plan["binds"]:
        if os.path.islink(path):  # /bin -> usr/bin on merged-/usr systems
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            os.makedirs(root + path, exist_ok=True)
            bind(path, root + path, MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.makedirs(root + "/dev")
    for device in DEVICES:
        open(root + device, "w").close()
        bind(device, root + device, MS_RDONLY | MS_NOSUID)
    os.makedirs(root + plan["work"])
    bind(plan["work"], root + plan["work"], MS_NOSUID | MS_NODEV)
    with open(plan["harness"], "rb") as source, open(root + "/harness.py", "wb") as copy:
        copy.write(source.read())
    mount("none", root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def enter(plan: dict) -> None:
    """Steps 2 and 3: into the new root, and from root to the sandbox's user for good."""
    uid = plan["uid"]
    if plan["user_namespace"]:
        become_user_in_new_namespace(uid)
    else:
        os.chown(plan["work"], uid, uid)
    os.chroot(plan["root"])
    os.chdir(plan["work"])
    if not plan["user_namespace"]:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def become_user_in_new_namespace(uid: int) -> None:
    """Without root on the host, `unshare --user` made us root of a user namespace that maps
    only the grader's own user; there is no other id to change to. So enter a second user
    namespace in which that user is `uid`: a user id other than 0 loses every capability at
    the ``exec``, and the capabilities of this namespace reach nothing of the first one's
    (its mounts, the root we built). Must precede the chroot: a chrooted process cannot
    make a user namespace."""
    if _libc().unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER) failed")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} 0 1"), ("gid_map", f"{uid} 0 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def bind(source: str, target: str, flags: int) -> None:
    """Bind `source` at `target`, then apply `flags` (a bind mount takes them only on a
    remount) on top of those of `source`'s mount that a remount must keep."""
    mount(source, target, None, MS_BIND | MS_REC, None)
    kept = os.statvfs(source).f_flag
    flags |= sum(flag for st_flag, flag in _KEPT_FLAGS.items() if kept & st_flag)
    mount("none", target, None, MS_REMOUNT | MS_BIND | flags, None)


def mount(source: str, target: str, fstype, flags: int, data) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    if _libc().mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


if __name__ == "__main__":
    main()
