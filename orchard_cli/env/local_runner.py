"""The agent that runs INSIDE a local sandbox: one per sandbox, for its whole life.

`local.py` copies it into the sandbox's run/ folder and starts it under bubblewrap as
`python3 -I -S /.orchard/runner.py /.orchard/ctl.sock`. It spawns every command of its sandbox,
so a command costs a fork + exec rather than a bwrap start (5-7 ms). It is one single-threaded
poll loop (exhausting the pids limit cannot stop it making threads, and forking a single-threaded
process is safe):

  The runner connects to the Unix socket named by argv[1] (the backend accepts that one
  connection only) and makes itself non-dumpable before it runs anything, so no command can
  reach the channel through /proc/<pid>/fd and forge a reply.
  backend -> runner  frames: 4-byte big-endian length + marshal (version 2) of a dict; the first
                     is the config, then {"op": "exec", "id", "argv", "cwd", "env", "stdin",
                     "timeout", "limit"}.
  runner -> backend  JSON lines: {"ready": 1, ...} once, then one line per finished command.
                     Byte strings travel as base64, so the backend never parses anything but
                     JSON from inside the sandbox.

Each command runs under a *keeper*: a forked copy of the runner that makes itself a child
subreaper (prctl PR_SET_CHILD_SUBREAPER), starts the command in its own session (posix_spawn:
a vfork + exec, no copy of the keeper; fork + exec where the Python lacks it), and waits. Every
process the command starts stays below the keeper, even one that left its session and its
environment (`setsid env -i CMD &`): an orphan is re-parented to the keeper, not to init. When the
command exits, what it left running gets GRACE seconds to finish, then the keeper SIGKILLs the
rest and reports how many there were (`leftovers`); on a timeout the runner tells the keeper
(SIGUSR1), which kills the whole tree. The keeper sends the command's pid, then its wait status
and the leftover count, over a status pipe; that status line answers the job (a command with no
leftovers is only checked with one waitid, no /proc scan), and the keeper, exiting, is reaped
after the reply. The next command's keeper is forked ahead, once a reply is sent and no command
runs (a *spare*: it closes the runner's descriptors and waits on its own pipes for a length-
prefixed request), so a command costs a pipe write rather than a fork. As a fallback (a keeper killed from inside), the
process group and every process carrying the job's ORCHARD_JOB=<token> are SIGKILLed too. Output
beyond `limit` bytes is read and dropped (the child never blocks), and counted.
With `listen` in the config ([port, unix socket path] pairs: one per spec.forwards entry, then the
proxy's, port 0 meaning any) it also listens on 127.0.0.1:<port> inside the sandbox's network
namespace, once per pair, and forwards each connection to that pair's Unix socket (the backend
relays it to the forward's host:port or to proxy_url). The hello says the ports it got
(`ports`, in the same order), or why one could not be had (`listen_error`).

Keep this file importable by any python3 >= 3.6, with only built-in modules on the hot path.
"""

import binascii
import marshal
import posix as os
import resource
import select
import sys
import time

try:
    import _signal as signal
except ImportError:  # pragma: no cover - very old or unusual interpreters
    import signal
try:
    import _socket as socket
except ImportError:  # pragma: no cover
    import socket

GRACE = 0.5     # after a command exits, this long for what it left running to finish by itself
KEEPER_GRACE = 3.0  # after a timeout, this long for the keeper to end the tree before SIGKILL
PR_SET_CHILD_SUBREAPER = 36
CHUNK = 65536
REPORT = 3      # Job.fds: the keeper's status pipe (0, 1, 2: the command's stdin, stdout, stderr)
MAX_REMEMBERED = 10000  # finished jobs whose leftover processes the runner kills when it exits
ERRNO_NOENT = 2
ERRNO_AGAIN = 11
EXIT_OK = 0


def b64(data):
    return binascii.b2a_base64(data).decode("ascii").strip()


def dumps(obj):
    """A tiny JSON encoder for what we send: ints, floats, None, bools and bytes (as base64)."""
    parts = []
    for key, value in obj.items():
        if value is None:
            text = "null"
        elif value is True or value is False:
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)
        elif isinstance(value, list):   # of ints
            text = "[" + ",".join(repr(int(item)) for item in value) + "]"
        else:
            text = '"' + b64(value) + '"'
        parts.append('"%s":%s' % (key, text))
    return ("{" + ",".join(parts) + "}\n").encode("ascii")


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def which(name, env):
    if "/" in name:
        return [name]
    return [d.rstrip("/") + "/" + name for d in env.get("PATH", "/usr/bin:/bin").split(":") if d]


def child(argv, cwd, env, fds):
    """In the forked child: never returns."""
    code = 126
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for sig in (signal.SIGPIPE, getattr(signal, "SIGXFSZ", None), signal.SIGCHLD):
            if sig is not None:
                signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        try:
            os.chdir(cwd)
        except OSError as exc:
            os.write(2, ("orchard: cannot enter %s: %s\n" % (cwd, exc.strerror)).encode())
            os._exit(126)
        error = None
        for path in which(argv[0], env):
            try:
                os.execve(path, argv, env)
            except OSError as exc:
                if error is None or exc.errno != ERRNO_NOENT:
                    error = exc
        code = 127 if error is None or error.errno == ERRNO_NOENT else 126
        reason = error.strerror if error is not None else "not found"
        os.write(2, ("orchard: %s: %s\n" % (argv[0], reason)).encode())
    finally:
        os._exit(code)


_PRCTL = []


def _prctl():
    """libc's prctl, looked up once (in the runner, before it forks its keepers)."""
    if not _PRCTL:
        try:
            import ctypes
            _PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
        except Exception:
            _PRCTL.append(None)
    return _PRCTL[0]


class _Stop(Exception):
    pass


def _descendants(root):
    """Pids of every live process below `root` (from /proc; zombies included)."""
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open("/proc/%s/stat" % name, os.O_RDONLY)
            try:
                stat = os.read(fd, 512).decode("ascii", "replace")
            finally:
                os.close(fd)
            parent[int(name)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            pass
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier and pid not in found}
        found |= frontier
    return found


def _kill_and_reap(pids):
    """SIGKILL `pids`, reap whatever of ours has ended, and give the kernel 10 ms."""
    for p in pids:
        try:
            os.kill(p, 9)
        except OSError:
            pass
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    time.sleep(0.01)


def _zombie(pid):
    try:
        fd = os.open("/proc/%d/stat" % pid, os.O_RDONLY)
        try:
            return os.read(fd, 512).decode("ascii", "replace").rsplit(")", 1)[1].split()[0] == "Z"
        finally:
            os.close(fd)
    except (OSError, IndexError):
        return True


def _has_children():
    """Whether anything is left below this process (a subreaper: every leftover is re-parented
    here), asked with one syscall, without reaping; the /proc scan only runs when it is so."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


SPAWN_SIGNALS = tuple(s for s in (signal.SIGPIPE, getattr(signal, "SIGXFSZ", None), signal.SIGCHLD, signal.SIGUSR1)
                      if s is not None)


def spawn(argv, cwd, env, fds):
    """Start the command in a session of its own with `fds` as its 0, 1, 2: by posix_spawn (a vfork
    and an exec: nothing of the keeper's memory is copied) where this Python has it (3.8+), the
    keeper entering `cwd` first (it is disposable), only on the PATH entries that exist; else, or
    when that fails, by fork + child(), which also writes the reason to the command's stderr."""
    spawner = getattr(os, "posix_spawn", None)
    if spawner is not None:
        try:
            os.chdir(cwd)
        except OSError:
            spawner = None
    if spawner is not None:
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)]
        for path in which(argv[0], env):
            try:
                os.stat(path)   # a failed spawn costs a vfork and an exec; a stat, a microsecond
            except OSError:
                continue
            try:
                return spawner(path, argv, env, file_actions=actions, setsid=True, setsigdef=SPAWN_SIGNALS)
            except OSError:
                continue
            except NotImplementedError:     # a libc without POSIX_SPAWN_SETSID (glibc < 2.26)
                break
    pid = os.fork()
    if pid == 0:
        child(argv, cwd, env, fds)
    return pid


def keeper(argv, cwd, env, fds, status_w, keep=False):
    """In the forked keeper: run the command below this process, wait for it, end what it left
    running, report on `status_w`; never returns."""
    def stop(signum, frame):
        raise _Stop()

    try:
        prctl = _prctl()
        if prctl is not None:
            prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        signal.signal(signal.SIGUSR1, stop)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = spawn(argv, cwd, env, fds)
        for fd in fds:
            os.close(fd)
        # The command inherited none of the runner's descriptors (all close-on-exec); the keeper
        # lets go of them now that it runs (other jobs' stdin pipes, the runner's channel).
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in (0, 1, 2, status_w):
                try:
                    os.close(int(name))
                except OSError:
                    pass
        write_all(status_w, ("pid %d\n" % pid).encode())
        status, timed_out, alive = None, False, set()
        try:
            while status is None:
                got, code = os.waitpid(-1, 0)
                if got == pid:
                    status = code
            deadline = time.monotonic() + (0 if keep else GRACE)  # keep: the runner's GRACE applies
            alive = _descendants(os.getpid()) if _has_children() else set()
            while alive and time.monotonic() < deadline:
                time.sleep(0.02)
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
                alive = _descendants(os.getpid())
        except _Stop:
            timed_out, alive = True, _descendants(os.getpid())
        except ChildProcessError:
            alive = set()
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        left = set()
        for _ in range(0 if keep and not timed_out else 50):
            live = {p for p in alive if not _zombie(p)}
            if not live:
                break
            left |= live
            _kill_and_reap(live)
            alive = _descendants(os.getpid())
        try:
            while not keep or timed_out:
                os.waitpid(-1, 0)
        except ChildProcessError:
            pass
        if keep and not timed_out:  # left to run on (keep_background): counted, not killed
            left = {p for p in _descendants(os.getpid()) if not _zombie(p)}
        if timed_out:
            left.discard(pid)
        write_all(status_w, ("status %s %d %d\n" % ("-" if status is None else status, len(left), int(timed_out))).encode())
    finally:
        os._exit(0)


def keeper_waiting(ends):
    """In a keeper forked ahead of its command (a spare): let go of every descriptor but its own
    pipe ends, wait for the request (argv, cwd, env, stdin, keep: a 4-byte length, then marshal),
    then be its keeper; exit if the runner closes the pipe without one. Never returns."""
    req_r, stdin_r, out_w, err_w, status_w = ends
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for name in os.listdir("/proc/self/fd"):    # the runner's channel and other jobs' pipes
            if int(name) not in (0, 1, 2) and int(name) not in ends:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = os.read(req_r, CHUNK)   # a length first: no EOF needed (another fork may hold the pipe)
            if not chunk:
                os._exit(0)     # the runner let it go, or is gone
            data += chunk
        os.close(req_r)
        req = marshal.loads(data[4:])
        if req["stdin"]:
            child_in = stdin_r
        else:
            os.close(stdin_r)
            child_in = os.open("/dev/null", os.O_RDONLY)
    except BaseException:
        os._exit(0)
    keeper(req["argv"], req["cwd"], req["env"], (child_in, out_w, err_w), status_w, req["keep"])


class Keeper:
    """A forked keeper waiting for its command, and the runner's ends of its pipes."""

    def __init__(self):
        pipes = []
        try:
            for _ in range(5):      # request, stdin, stdout, stderr, status
                pipes.append(os.pipe())
            self.pid = os.fork()
        except OSError:
            for r, w in pipes:
                os.close(r)
                os.close(w)
            raise
        if self.pid == 0:
            keeper_waiting((pipes[0][0], pipes[1][0], pipes[2][1], pipes[3][1], pipes[4][1]))
        for fd in (pipes[0][0], pipes[1][0], pipes[2][1], pipes[3][1], pipes[4][1]):
            os.close(fd)
        self.req_w, self.stdin_w, self.out_r, self.err_r, self.status_r = (
            pipes[0][1], pipes[1][1], pipes[2][0], pipes[3][0], pipes[4][0])

    def start(self, req):
        """Hand the command over; OSError if the keeper is gone (then every end is closed)."""
        try:
            data = marshal.dumps(req, 2)
            write_all(self.req_w, len(data).to_bytes(4, "big") + data)
            os.close(self.req_w)
        except OSError:
            self.discard()
            raise

    def discard(self):
        """Close the runner's ends: a waiting keeper exits (it is reaped as any other)."""
        for fd in (self.req_w, self.stdin_w, self.out_r, self.err_r, self.status_r):
            try:
                os.close(fd)
            except OSError:
                pass


class Job:
    def __init__(self, req, spare=None):
        self.id = req["id"]
        self.limit = req["limit"]
        self.start = time.monotonic()
        self.deadline = self.start + req["timeout"]
        self.token = "%d-%d-%d" % (os.getpid(), self.id, int(self.start * 1e6))
        self.buf = {1: bytearray(), 2: bytearray()}
        self.dropped = {1: 0, 2: 0}
        self.fds = {}           # our end of the pipe -> 0 (stdin), 1 (stdout) or 2 (stderr)
        self.stdin = req.get("stdin")
        self.status = None
        self.exited_at = None
        self.timed_out = False
        self.error = None
        env = dict(req["env"])
        env["ORCHARD_JOB"] = self.token
        order = {"argv": req["argv"], "cwd": req["cwd"], "env": env, "stdin": bool(self.stdin),
                 "keep": bool(req.get("keep"))}
        keeper = None
        if spare is not None:   # forked ahead (off this command's path); it may have been killed
            try:
                spare.start(order)
                keeper = spare
            except OSError:
                self.lost_spare = spare.pid
        if keeper is None:
            keeper = Keeper()
            keeper.start(order)
        self.pid = keeper.pid
        if self.stdin:
            os.set_blocking(keeper.stdin_w, False)
            self.fds[keeper.stdin_w] = 0
            self.stdin = memoryview(self.stdin)
        else:
            os.close(keeper.stdin_w)
        self.status_r = keeper.status_r
        os.set_blocking(self.status_r, False)
        self.report = b""
        self.reported = None
        self.command_pid = None
        self.leftovers = None
        self.keeper_reaped = False
        self.fds[self.status_r] = REPORT   # the command is done when its keeper says so, not when the keeper is gone
        self.fds[keeper.out_r] = 1
        self.fds[keeper.err_r] = 2

    def on_ready(self, fd):
        if self.fds[fd] == REPORT:
            self.read_report()
            return
        if self.fds[fd] == 0:
            try:
                n = os.write(fd, self.stdin[:CHUNK])
            except BlockingIOError:
                n = 0
            except OSError:
                n = len(self.stdin)
            self.stdin = self.stdin[n:]
            if not self.stdin:
                self.close(fd)
            return
        data = os.read(fd, CHUNK)
        if not data:
            self.close(fd)
            return
        stream = self.fds[fd]
        room = self.limit - len(self.buf[stream])
        self.buf[stream] += data[:max(room, 0)]
        self.dropped[stream] += max(len(data) - max(room, 0), 0)

    def close(self, fd):
        del self.fds[fd]
        os.close(fd)

    def reap(self, block=False):
        """Reap the keeper if it is gone; the command's status from it if its report did not come."""
        if self.keeper_reaped:
            return True
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid:
            self.keeper_reaped = True
            if self.status is None:
                self.read_report()
            if self.status is None:
                self.finished(self.command_status(status))
        return self.keeper_reaped

    def finished(self, status):
        self.status = status
        self.exited_at = time.monotonic()

    def read_report(self):
        """What the keeper wrote: the command's pid, then its wait status and the leftovers. The
        status line (written once nothing of the command runs) finishes the job."""
        if self.status_r < 0:
            return
        eof = False
        while True:
            try:
                data = os.read(self.status_r, 4096)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                eof = True
                break
            self.report += data
        done = False
        for line in self.report.decode("ascii", "replace").splitlines():
            parts = line.split()
            if parts[:1] == ["pid"] and len(parts) == 2:
                self.command_pid = int(parts[1])
            elif parts[:1] == ["status"] and len(parts) == 4:
                self.leftovers = int(parts[2])
                self.reported = None if parts[1] == "-" else int(parts[1])
                done = True
        if done or eof:
            self.close(self.status_r)
            self.status_r = -1
        if done and self.status is None:
            self.finished(self.command_status(0))

    def command_status(self, keeper_status):
        """The command's own wait status, as the keeper reported it (the keeper's if it said nothing)."""
        return self.reported if self.reported is not None else keeper_status

    def done(self, now):
        if self.status is None:
            return False
        return not [s for s in self.fds.values() if s in (1, 2)] or now > self.exited_at + GRACE

    def kill(self):
        """Timed out: the keeper ends the command's whole tree; failing that, SIGKILL for it, the
        command's process group and every process carrying the job's token."""
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except OSError:
            pass
        deadline = time.monotonic() + KEEPER_GRACE
        while time.monotonic() < deadline:
            if self.reap():
                break
            time.sleep(0.01)
        self.read_report()
        if not self.keeper_reaped:
            try:
                os.kill(self.pid, 9)
            except OSError:
                pass
        kill_jobs([(self.command_pid or self.pid, self.token)])

    def result(self, draining):
        """The reply line; pipes still held by background children go on being drained."""
        for fd, stream in list(self.fds.items()):
            if stream in (1, 2):
                del self.fds[fd]
                draining.add(fd)
            else:
                self.close(fd)
        self.status_r = -1
        code = signum = None
        if not self.timed_out and self.status is not None:
            if os.WIFSIGNALED(self.status):
                signum = os.WTERMSIG(self.status)
                code = 128 + signum
            else:
                code = os.WEXITSTATUS(self.status)
        return dumps({"id": self.id, "exit": code, "signal": signum, "timed_out": self.timed_out,
                      "out": bytes(self.buf[1]), "err": bytes(self.buf[2]),
                      "out_dropped": self.dropped[1], "err_dropped": self.dropped[2],
                      "duration": round(time.monotonic() - self.start, 6),
                      "leftovers": self.leftovers, "error": self.error})


def kill_jobs(jobs):
    """SIGKILL the process groups and every process carrying one of the tokens of `jobs`,
    a list of (pid, token)."""
    for pid, _ in jobs:
        for _ in range(100):
            try:
                os.killpg(pid, 9)
            except OSError:
                break
    markers = [("ORCHARD_JOB=%s\0" % token).encode() for _, token in jobs]
    me = os.getpid()
    for _ in range(20):
        found = 0
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                fd = os.open("/proc/%s/environ" % name, os.O_RDONLY)
                try:
                    env = b"\0" + os.read(fd, 1 << 20)
                finally:
                    os.close(fd)
                if any(b"\0" + marker in env for marker in markers):
                    os.kill(int(name), 9)
                    found += 1
            except OSError:
                pass
        if not found:
            break


def pty_keeper(req, env, prctl):
    """In the forked session leader of a terminal: a child subreaper (as exec's keeper) that runs
    the command below it, waits for it, SIGKILLs whatever it left running (even a `setsid` child
    that left its session), and exits as the command did; never returns. It ignores the signals
    sent to its process group (the command gets them), and dies only by SIGKILL."""
    if prctl is not None:
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    passed = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
    for sig in passed:
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        try:
            for sig in (signal.SIGPIPE, signal.SIGCHLD) + passed:
                signal.signal(sig, signal.SIG_DFL)
            try:
                os.chdir(req["cwd"])
            except OSError:
                os.chdir("/")
            argv = req["argv"]
            for path in which(argv[0], env):
                try:
                    os.execve(path, argv, env)
                except OSError:
                    pass
            os.write(2, ("orchard: command not found: %s\r\n" % argv[0]).encode())
        finally:
            os._exit(127)
    status = 0
    try:
        while True:
            got, code = os.waitpid(-1, 0)
            if got == pid:
                status = code
                break
    except ChildProcessError:
        pass
    for _ in range(50):  # what it left: no grace, the terminal is gone
        live = {p for p in _descendants(os.getpid()) if not _zombie(p)}
        if not live:
            break
        _kill_and_reap(live)
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


class PtySession:
    """A process on a pseudo-terminal, in a session of its own (op "pty"): its output goes back
    as {"id", "out"} events, then {"id", "exit"} (minus the signal when one killed it); input,
    resizes and signals come as "pty_in", "pty_resize" and "pty_signal" frames."""

    def __init__(self, req, write):
        import fcntl
        import termios
        self.fcntl, self.termios = fcntl, termios
        self.id = req["id"]
        self.write = write
        self.status = None
        self.eof = False
        master, slave = os.openpty()
        self._winsize(slave, req.get("rows") or 24, req.get("cols") or 80)
        env = dict(req["env"])
        env.setdefault("TERM", "xterm-256color")
        prctl = _prctl()  # looked up here, before the fork
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                for target in (0, 1, 2):
                    os.dup2(slave, target)
                for name in os.listdir("/proc/self/fd"):   # the runner's channel, jobs' pipes, the spare's
                    if int(name) > 2:
                        try:
                            os.close(int(name))
                        except OSError:
                            pass
                signal.set_wakeup_fd(-1)
                pty_keeper(req, env, prctl)
            finally:
                os._exit(127)
        os.close(slave)
        os.set_blocking(master, False)
        self.master = master
        write(dumps({"id": self.id, "ready": 1, "pid": self.pid}))

    def _winsize(self, fd, rows, cols):
        import struct
        try:
            self.fcntl.ioctl(fd, self.termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        except OSError:
            pass

    def on_ready(self):
        """Output to send; at EOF (the terminal's last writer is gone) stop reading."""
        while True:
            try:
                data = os.read(self.master, CHUNK)
            except BlockingIOError:
                return
            except OSError:     # EIO: the slave side has no process left
                data = b""
            if not data:
                self.eof = True
                return
            self.write(dumps({"id": self.id, "out": data}))

    def control(self, req):
        op = req["op"]
        try:
            if op == "pty_in":
                data = memoryview(req.get("data") or b"")
                while data:
                    try:
                        data = data[os.write(self.master, data):]
                    except BlockingIOError:
                        time.sleep(0.001)
            elif op == "pty_resize":
                self._winsize(self.master, req.get("rows") or 24, req.get("cols") or 80)
            elif op in ("pty_signal", "pty_close"):
                sig = 9 if op == "pty_close" else int(req.get("sig") or 15)
                if sig == 9:  # the keeper dies with it: what the command left goes first (setsid'd ones too)
                    for pid in _descendants(self.pid):
                        try:
                            os.kill(pid, 9)
                        except OSError:
                            pass
                try:
                    os.killpg(self.pid, sig)
                except ProcessLookupError:  # so early that the child has no group of its own yet
                    os.kill(self.pid, sig)
        except OSError:
            pass

    def reap(self):
        if self.status is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                self.status = status

    def finished(self):
        """Exited and its output drained: send the exit code (after every output event)."""
        if self.status is None:
            return False
        self.on_ready()
        deadline = time.monotonic() + 1.0
        while not self.eof and time.monotonic() < deadline:
            time.sleep(0.01)
            self.on_ready()
        code = -os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else os.WEXITSTATUS(self.status)
        os.close(self.master)
        try:
            os.killpg(self.pid, 9)  # what it left on the terminal goes with it (the keeper ended the rest)
        except OSError:
            pass
        self.write(dumps({"id": self.id, "exit": code}))
        return True


class Relay:
    """One proxied connection: bytes both ways between a TCP client and the backend's socket."""

    def __init__(self, a, b):
        self.socks = {a.fileno(): a, b.fileno(): b}
        self.peer = {a.fileno(): b.fileno(), b.fileno(): a.fileno()}
        self.pending = {a.fileno(): b"", b.fileno(): b""}   # bytes waiting to go TO this fd
        self.eof = set()

    def masks(self):
        out = {}
        for fd in self.socks:
            mask = 0
            if fd not in self.eof and not self.pending[self.peer[fd]]:
                mask |= select.POLLIN
            if self.pending[fd]:
                mask |= select.POLLOUT
            out[fd] = mask
        return out

    def on_ready(self, fd, events):
        sock = self.socks[fd]
        try:
            if events & select.POLLOUT and self.pending[fd]:
                self.pending[fd] = self.pending[fd][sock.send(self.pending[fd]):]
                if not self.pending[fd] and self.peer[fd] in self.eof:
                    sock.shutdown(1)
            if events & (select.POLLIN | select.POLLHUP | select.POLLERR) and fd not in self.eof:
                data = sock.recv(CHUNK)
                if data:
                    self.pending[self.peer[fd]] += data
                else:
                    self.eof.add(fd)
                    if not self.pending[self.peer[fd]]:
                        self.socks[self.peer[fd]].shutdown(1)
        except OSError as exc:
            if exc.errno != ERRNO_AGAIN:
                self.dead()
        if events & (select.POLLERR | select.POLLHUP) and fd in self.eof and not self.pending[fd]:
            self.dead()

    def dead(self):
        self.eof.update(self.socks)
        self.pending = dict.fromkeys(self.socks, b"")

    def finished(self):
        return len(self.eof) == 2 and not any(self.pending.values())

    def close(self):
        for sock in self.socks.values():
            sock.close()


def protect():
    """PR_SET_DUMPABLE 0: commands (same uid) can no longer open /proc/<runner>/fd/*."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0
    except Exception:
        return False


class Runner:
    def __init__(self, path):
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        folder, _, name = path.rpartition("/")
        os.chdir(folder or "/")     # a relative name: no 108-byte limit on the folder's path
        self.ctl.connect(name)
        self.fd = self.ctl.fileno()
        self.inbuf = bytearray()
        self.config = None
        self.jobs = {}          # fd -> job
        self.active = []
        self.exited = []        # finished jobs whose keeper is yet to be reaped (it reported, then exits)
        self.spare = None       # a Keeper forked ahead for the next command
        self.reaping = []       # pids of spare keepers that died unused
        self.ptys = {}          # session id -> PtySession
        self.started = []       # (pid, token) of recent jobs: their leftovers die with the runner
        self.relays = []
        self.draining = set()   # output pipes of finished commands, held by their children
        self.listeners = {}     # fd -> (listening socket, the Unix socket its connections go to)
        rd, self.wake_w = os.pipe()
        self.wake_r = rd
        os.set_blocking(self.wake_w, False)
        os.set_blocking(rd, False)
        signal.signal(signal.SIGCHLD, lambda *a: None)
        signal.set_wakeup_fd(self.wake_w)

    def read_frames(self):
        data = os.read(self.fd, CHUNK)
        if not data:
            return False
        self.inbuf += data
        while len(self.inbuf) >= 4:
            size = int.from_bytes(self.inbuf[:4], "big")
            if len(self.inbuf) < 4 + size:
                break
            frame = marshal.loads(bytes(self.inbuf[4:4 + size]))
            del self.inbuf[:4 + size]
            self.handle(frame)
        return True

    def send(self, data):
        write_all(self.fd, data)

    def handle(self, req):
        if self.config is None:
            _prctl()
            self.config = req
            if req.get("nofile"):  # commands get the open-files limit orchard itself started with
                try:
                    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                    soft = req["nofile"] if hard == resource.RLIM_INFINITY else min(req["nofile"], hard)
                    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                except (ValueError, OSError):
                    pass
            ports, error = self.listen(req.get("listen") or [])
            protected = protect()
            write_all(self.fd, dumps({"ready": 1, "pid": os.getpid(), "ports": ports,
                                      "listen_error": error, "protected": protected}))
            self.fork_spare()
            return
        op = req.get("op")
        if op == "pty":
            try:
                self.ptys[req["id"]] = PtySession(req, self.send)
            except OSError as exc:
                self.send(dumps({"id": req["id"], "error": ("cannot start the terminal: %s" % exc).encode()}))
            return
        if op in ("pty_in", "pty_resize", "pty_signal", "pty_close"):
            session = self.ptys.get(req.get("sid"))
            if session is not None:
                session.control(req)
            return
        spare, self.spare = self.spare, None
        try:
            job = Job(req, spare)
        except OSError as exc:
            if spare is not None:
                self.reaping.append(spare.pid)
            write_all(self.fd, dumps({"id": req["id"], "exit": None, "timed_out": False,
                                "error": ("cannot start the command: %s" % exc).encode()}))
            return
        if getattr(job, "lost_spare", None):
            self.reaping.append(job.lost_spare)
        self.active.append(job)
        self.started.append((job.pid, job.token))
        del self.started[:-MAX_REMEMBERED]
        for fd in job.fds:
            self.jobs[fd] = job

    def fork_spare(self):
        """Fork the next command's keeper now, while nothing waits on the runner (after a reply):
        a command then costs a pipe write, not a fork. Where no process can be had (a pids
        limit), the next command forks its own."""
        if self.spare is None and not self.active:
            try:
                self.spare = Keeper()
            except OSError:
                pass

    def reap_lost(self):
        """Reap spare keepers that were killed or let go (by pid: never another's status)."""
        left = []
        for pid in self.reaping:
            try:
                if not os.waitpid(pid, os.WNOHANG)[0]:
                    left.append(pid)
            except ChildProcessError:
                pass
        self.reaping = left

    def listen(self, pairs):
        """Listen on 127.0.0.1:<port> for each [port, unix path], in order (a fixed port first,
        so that port 0 never takes one of them); the ports got, and an error or None."""
        ports = []
        for port, path in pairs:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(128)
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                return ports, ("cannot listen on 127.0.0.1:%d in the sandbox: %s"
                               % (port, exc.strerror)).encode()
            self.listeners[sock.fileno()] = (sock, path)
            ports.append(sock.getsockname()[1])
        return ports, None

    def accept(self, listener, path):
        try:
            fd, _ = listener._accept()
            conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0, fd)
        except OSError:
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            conn.close()
            upstream.close()
            return
        conn.setblocking(False)
        upstream.setblocking(False)
        self.relays.append(Relay(conn, upstream))

    def loop(self):
        while True:
            now = time.monotonic()
            timeout = 3600.0
            for job in self.active:
                left = (job.exited_at + GRACE if job.status is not None else job.deadline) - now
                timeout = min(timeout, max(left, 0))
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            poller.register(self.wake_r, select.POLLIN)
            for fd in self.listeners:
                poller.register(fd, select.POLLIN)
            for fd, job in list(self.jobs.items()):
                if fd not in job.fds:   # a report read (and closed) while reaping
                    del self.jobs[fd]
                    continue
                poller.register(fd, select.POLLOUT if job.fds[fd] == 0 else select.POLLIN)
            for fd in self.draining:
                poller.register(fd, select.POLLIN)
            pty_of = {}
            for session in self.ptys.values():
                if not session.eof:
                    pty_of[session.master] = session
                    poller.register(session.master, select.POLLIN)
            relay_of = {}
            for relay in self.relays:
                for fd, mask in relay.masks().items():
                    relay_of[fd] = relay
                    poller.register(fd, mask)
            for fd, events in poller.poll(timeout * 1000):
                if fd == self.fd:
                    if not self.read_frames():
                        return
                elif fd == self.wake_r:
                    try:
                        os.read(fd, 512)
                    except OSError:
                        pass
                    for job in self.active:
                        job.reap()
                    self.exited = [job for job in self.exited if not job.reap()]
                    self.reap_lost()
                    for session in self.ptys.values():
                        session.reap()
                elif fd in self.listeners:
                    self.accept(*self.listeners[fd])
                elif fd in relay_of:
                    relay_of[fd].on_ready(fd, events)
                elif fd in pty_of:
                    pty_of[fd].on_ready()
                elif fd in self.draining:
                    if not os.read(fd, CHUNK):
                        self.draining.discard(fd)
                        os.close(fd)
                elif fd in self.jobs:
                    job = self.jobs[fd]
                    if fd in job.fds:
                        job.on_ready(fd)
                    if fd not in job.fds:
                        del self.jobs[fd]
            self.finish(time.monotonic())

    def finish(self, now):
        for key, session in list(self.ptys.items()):
            session.reap()
            if session.finished():
                del self.ptys[key]
        for relay in [r for r in self.relays if r.finished()]:
            relay.close()
            self.relays.remove(relay)
        for job in list(self.active):
            job.reap()
            if job.status is None and now >= job.deadline:
                job.timed_out = True
                job.kill()
                job.reap(block=True)
            if job.timed_out or job.done(now):
                for fd in job.fds:
                    self.jobs.pop(fd, None)
                self.active.remove(job)
                write_all(self.fd, job.result(self.draining))
                if not job.reap():
                    self.exited.append(job)
                self.fork_spare()

    def shutdown(self):
        if self.spare is not None:
            self.spare.discard()
        kill_jobs(self.started)


def main():
    runner = Runner(sys.argv[1])
    try:
        runner.loop()
    finally:
        runner.shutdown()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
