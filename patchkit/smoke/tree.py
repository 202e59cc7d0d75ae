"""Every process one server started, however it left: what teardown signals and what it proves gone.

A server is launched as the leader of its own session (``start_new_session``), so its pid is the id
of its session and of its first process group. A process belongs to the server's tree when

* its session id or process group id is the leader's pid (SGLang's scheduler and detokenizer, a
  child that moved to another group, an orphan re-parented to init: none of these change the session);
* or its parent is a process of the tree (a child that made its own session with ``setsid``), found
  by a watcher thread that reads ``/proc/<pid>/stat`` every :data:`WATCH_INTERVAL_S` for the
  server's whole life, so a pid is recorded while its parent is still there to vouch for it;
* or, on Linux, it is an orphan re-parented to patchkit itself: while a server runs, patchkit is a
  child subreaper (``PR_SET_CHILD_SUBREAPER``), so a process that both left the session and lost its
  parent between two scans (a double fork) is re-parented to patchkit, not to init, and is claimed
  here (a process patchkit runs itself stays in patchkit's session and is never taken for one). Those
  orphans are reaped here too, so none lingers as a zombie on a host whose init does not reap.

A zombie counts as gone: it holds no memory, no GPU and no port.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from dataclasses import dataclass

import psutil

#: How often the watcher records the tree while the server runs (a scan is one read of each
#: /proc/<pid>/stat: a few ms; the subreaper catches what escapes between two scans).
WATCH_INTERVAL_S = 1.0
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


@dataclass(frozen=True)
class _Row:
    """One process as ``/proc/<pid>/stat`` describes it."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    created: float  # seconds since the epoch, as psutil's create_time
    zombie: bool


def _proc_table() -> list[_Row]:
    """Every process, one read of ``/proc/<pid>/stat`` each (Linux); psutil elsewhere. A scan runs many
    times a second during teardown and every :data:`WATCH_INTERVAL_S` while a server serves, so it must
    stay cheap on a host with a thousand processes."""
    if not os.path.isdir("/proc/self"):
        return _psutil_table()
    boot, ticks = psutil.boot_time(), os.sysconf("SC_CLK_TCK")
    rows = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
            fields = data[data.rindex(b")") + 2:].split()  # after "pid (comm) ": field 3 (state) on
            rows.append(_Row(int(name), int(fields[1]), int(fields[2]), int(fields[3]),
                             boot + int(fields[19]) / ticks, fields[0] == b"Z"))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return rows


def _psutil_table() -> list[_Row]:
    rows = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            rows.append(_Row(proc.pid, proc.ppid(), os.getpgid(proc.pid), os.getsid(proc.pid), proc.create_time(),
                             proc.status() == psutil.STATUS_ZOMBIE))
    return rows


class ProcessTree:
    """The processes of the server whose session ``leader`` leads (see the module docstring)."""

    def __init__(self, leader: int, started: float):
        self.leader = leader
        self.started = started - 1.0  # when the leader was started (time.time()); start times have ticks
        self._known: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        with contextlib.suppress(psutil.NoSuchProcess):
            self._known[leader] = psutil.Process(leader)

    # ------------------------------------------------------------------ finding the tree
    def scan(self) -> list[psutil.Process]:
        """Record every process of the tree that exists now; return the live ones (zombies reaped or left out)."""
        me, reaping = os.getpid(), subreaper_active()
        with self._lock:
            rows = {row.pid: row for row in _proc_table()}
            added = True
            while added:  # a child found in this pass makes its own children members in the next
                added = False
                parents = {pid for pid in self._known if self._same(rows.get(pid))}
                for row in rows.values():
                    if row.pid not in self._known and row.pid != me and self._belongs(row, parents, me, reaping):
                        with contextlib.suppress(psutil.NoSuchProcess):
                            self._known[row.pid] = psutil.Process(row.pid)
                            added = True
            live = []
            for pid, proc in self._known.items():
                found = rows.get(pid)
                if found is None or not self._same(found):
                    continue
                if not found.zombie:
                    live.append(proc)
                elif found.ppid == me and pid != self.leader:  # an orphan of the tree, ours to reap (the
                    with contextlib.suppress(ChildProcessError, OSError):  # leader's status is its Popen's)
                        os.waitpid(pid, os.WNOHANG)
            return live

    def _same(self, row: _Row | None) -> bool:
        """Whether ``row`` is the process recorded under its pid (not a later one that reused the pid)."""
        if row is None:
            return False
        try:
            return abs(self._known[row.pid].create_time() - row.created) < 0.5
        except (KeyError, psutil.Error):
            return False

    def _belongs(self, row: _Row, parents: set[int], me: int, reaping: bool) -> bool:
        if self.leader in (row.sid, row.pgid) or row.ppid in parents:
            return True
        # an orphan re-parented to patchkit, the subreaper, after the server started; a child patchkit ran
        # itself shares patchkit's session (proc.run never makes a new one) and is never taken for one
        return reaping and row.ppid == me and row.sid != os.getsid(0) and row.created >= self.started

    # ------------------------------------------------------------------ watching it while the server runs
    def watch(self) -> None:
        """Record the tree every :data:`WATCH_INTERVAL_S` in a daemon thread until :meth:`stop_watching`."""
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name=f"server-tree-{self.leader}", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            with contextlib.suppress(Exception):  # a scan racing an exiting process must not end the watch
                self.scan()

    def stop_watching(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5.0)

    # ------------------------------------------------------------------ signalling it
    def signal(self, sig: int, skip: set[int] | frozenset[int] = frozenset()) -> set[int]:
        """Send ``sig`` to every live process of the tree but those in ``skip`` (and, the first time, the
        leader's group); return the pids that got it."""
        if self.leader not in skip:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.leader, sig)
        sent = set()
        for proc in self.scan():
            if proc.pid in skip:
                continue
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                proc.send_signal(sig)  # psutil checks the pid still names the process it recorded
                sent.add(proc.pid)
        return sent


# ---------------------------------------------------------------------- the subreaper (Linux)
def _prctl(option: int, value: int) -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if option == _PR_GET_CHILD_SUBREAPER:
            out = ctypes.c_int(0)
            return int(out.value) if libc.prctl(option, ctypes.byref(out), 0, 0, 0) == 0 else None
        return 0 if libc.prctl(option, value, 0, 0, 0) == 0 else None
    except (OSError, AttributeError):
        return None


def subreaper_active() -> bool:
    return _prctl(_PR_GET_CHILD_SUBREAPER, 0) == 1


def set_subreaper(on: bool) -> bool | None:
    """Make patchkit a child subreaper (or not); return whether it was one before (None: not on this system)."""
    before = _prctl(_PR_GET_CHILD_SUBREAPER, 0)
    if before is None:
        return None
    _prctl(_PR_SET_CHILD_SUBREAPER, int(on))
    return before == 1
