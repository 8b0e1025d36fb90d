"""Private files and folders for the hook's state: folders 0700, files 0600, whatever the umask.

``os.makedirs(path, mode=0o700)`` gives the *parents* it creates the umask's default (often 0755)
and leaves an existing folder as it is; ``open(path, "w")`` makes a file 0644. The hook's state
names sessions and holds their turn counts, so every folder it creates is chmod-ed to 0700, the
state folder itself is brought to 0700 when it is ours, and files are written 0600 through a
temporary file and an atomic rename. Only light stdlib modules: this runs on every prompt.
"""

from __future__ import annotations

import os

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: str) -> None:
    """Create ``path`` and its missing parents as 0700; an existing ``path`` we own becomes 0700
    (unless it is a sticky folder such as /tmp, or the home directory, given as the state folder)."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        try:  # noqa: SIM105 - contextlib stays off the hook path
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            pass
        os.chmod(folder, DIR_MODE)  # mkdir's mode went through the umask
    if not missing:
        st = os.stat(path)
        shared = st.st_mode & 0o1000 or os.path.abspath(path) == os.path.expanduser("~")  # /tmp, a home
        if st.st_uid == os.geteuid() and st.st_mode & 0o777 != DIR_MODE and not shared:
            os.chmod(path, DIR_MODE)


def write_private(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically, the file 0600 (a stale temporary file included)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def open_private(path: str) -> int:
    """``os.open`` of a lock file: created 0600, and made 0600 if it was not."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o777 != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd
