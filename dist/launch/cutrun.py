#!/usr/bin/env python3
"""cutrun: start one process per GPU, the way torchrun does, without MPI.

    cutrun --standalone --nproc-per-node 2 build/bin/cutrain train ...
    cutrun --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 --nproc-per-node 8 PROGRAM ...

    srun --ntasks-per-node=1 cutrun --nproc-per-node gpu PROGRAM ...   # one cutrun per node

Each process gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT), CUTRAIN_RUN_ID,
which keeps two jobs on one port apart and keeps strangers out of the store (without --rdzv-id,
node 0 draws a random one and prints the command the other nodes must run with it, as
CUTRAIN_RUN_ID, so it stays out of `ps`),
and CUTRAIN_RDZV_TIMEOUT when --rdzv-timeout is given. Rank 0's store listens at MASTER_ADDR only
(IPv4 or IPv6), or at --store-bind.
Every output line is prefixed with its rank ("[rank1]: ..."); --log-dir also keeps one file per
rank. A console or log that stops taking output (a closed pipe, a full disk) is said once and
dropped, and the ranks' output is still read, so no rank blocks on it. When a rank fails, the
others get SIGTERM, then SIGKILL after the grace period; cutrun says which rank failed and how,
and exits with that rank's exit code. A rank whose heartbeats stop for --stall-timeout (stopped,
frozen), or whose heartbeats say it has made no progress that long while waiting for no other rank
(blocked), is named, killed, and the job stopped the same way. SIGINT and SIGTERM sent to cutrun are
passed on to every rank, and SIGHUP and SIGUSR1 stop them as SIGTERM does; such a stop waits for
the ranks to finish their step and save before it kills what is left, naming it (Note [A stop
that saves]); cutrun then exits 0 when every rank saved and exited 0, and 128 + the signal's number
otherwise. Signals within a second of the first are the same stop; a later one kills every
rank at once. Should cutrun itself die, even by SIGKILL, the kernel kills every rank with it.

Under srun (SLURM_PROCID set), --nnodes, --node-rank and --master-addr default to Slurm's
SLURM_STEP_NUM_NODES, SLURM_NODEID and the first host of SLURM_STEP_NODELIST, the port to one
derived from SLURM_JOB_ID, and the run id to the job and step ids.

Python's standard library only.
"""

UNSUPPORTED = """\
torchrun flags cutrun does not take:
  --rdzv-backend, --rdzv-endpoint, --rdzv-conf   the rendezvous is rank 0's store at
                                                 --master-addr:--master-port
  --monitor-interval                             cutrun reaps ranks as they exit, and watches their
                                                 heartbeats (--stall-timeout)
  --nnodes MIN:MAX, --role                       no elastic jobs
  --redirects, --logs-specs, --local-addr        use --log-dir and --tee
  --no-python, -m/--module, --run-path, --start-method
"""

import argparse
import ctypes
import itertools
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

USAGE_ERROR = 2
# Written by CMake when it copies this script into build/bin, from what app/version.h says.
VERSION = "@CUTRAIN_VERSION@"
COMMIT = "@CUTRAIN_GIT_COMMIT@"
MAX_NPROC_PER_NODE = 1024
MAX_WORLD_SIZE = 4096  # Note [The largest world] in dist/launch/env.h
MAX_SECONDS = 86400


class Usage(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line."""

    def error(self, message):
        # "argument --nnodes/--nnodes_: 'x': not a whole number" -> "--nnodes x: not a whole number"
        message = re.sub(r"^argument (--[\w-]+)(/--\w+)?: ", r"\1 ", message)
        fail(f"{message} (see cutrun --help)")


def fail(message):
    sys.stderr.write(f"cutrun: error: {message}\n")
    sys.exit(USAGE_ERROR)


def whole_number(text):
    """argparse type: decimal digits (hex, '1_000' and the like are refused), bounded in check()."""
    if not re.fullmatch(r"-?[0-9]{1,20}", text):
        raise argparse.ArgumentTypeError(f"{text}: not a whole number")
    return int(text)


def seconds(text):
    """argparse type: a finite number of seconds, bounded in check()."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text}: not a number of seconds")
    return value


def process_count(text):
    """--nproc-per-node: a whole number, or torchrun's gpu (one per visible GPU), cpu (one per core), auto."""
    if text in ("gpu", "auto"):
        gpus = visible_gpus()
        if gpus > 0:
            return gpus
        if text == "gpu":
            raise argparse.ArgumentTypeError("gpu: no GPU visible here (CUDA_VISIBLE_DEVICES, /dev/nvidia*)")
        text = "cpu"
    if text == "cpu":
        return len(os.sched_getaffinity(0))
    try:
        return whole_number(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text}: not a whole number, gpu, cpu or auto") from None


def visible_gpus():
    """The GPUs a process started here would see: CUDA_VISIBLE_DEVICES's list, else /dev/nvidiaN."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([d for d in listed.split(",") if d.strip() not in ("", "-1")])
    return len([d for d in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", d)])


def parse_args(argv):
    parser = Usage(prog="cutrun", description=__doc__.split("\n\n")[0], allow_abbrev=False, epilog=UNSUPPORTED,
                   formatter_class=argparse.RawDescriptionHelpFormatter)

    def flag(name, **kwargs):
        # torchrun accepts both --nproc-per-node and --nproc_per_node; so do we.
        spellings = [f"--{name}"] + ([f"--{name.replace('-', '_')}"] if "-" in name else [])
        parser.add_argument(*spellings, dest=name.replace("-", "_"), **kwargs)

    flag("nproc-per-node", type=process_count, default=1, metavar="N",
         help=f"processes on this node: 1..{MAX_NPROC_PER_NODE}, gpu (one per visible GPU), cpu (one per core), "
              "or auto (gpu when there are GPUs, else cpu)")
    flag("nnodes", type=whole_number, default=None, metavar="M", help="number of nodes (default 1, or Slurm's)")
    flag("node-rank", type=whole_number, default=None, metavar="R",
         help="this node's rank, 0..M-1 (default 0, or Slurm's)")
    flag("master-addr", default=None, metavar="HOST",
         help="where rank 0 serves the store: a name, an IPv4 or an IPv6 address (default 127.0.0.1, or the "
              "first node of Slurm's step)")
    flag("master-port", type=whole_number, default=None, metavar="PORT",
         help="the store's port (default 29500, or one from Slurm's job id)")
    flag("standalone", action="store_true", help="a single node on a free port")
    flag("rdzv-id", default=None, metavar="ID",
         help="the run id, the same on every node; also read from CUTRAIN_RUN_ID (default: from Slurm's job id "
              "under srun, else node 0 draws a random one and prints the command for the other nodes)")
    flag("rdzv-timeout", type=seconds, default=None, metavar="S",
         help=f"seconds the ranks may take to meet before they give up, naming who is missing (sets "
              f"CUTRAIN_RDZV_TIMEOUT; default 300), above 0, at most {MAX_SECONDS}")
    flag("store-bind", default=None, metavar="HOST",
         help="where rank 0's store listens, when not at --master-addr (e.g. 0.0.0.0: every interface)")
    flag("log-dir", default=None, metavar="DIR", help="also write each rank's output to DIR/rank<R>.log")
    flag("tee", type=int, choices=range(4), default=None, metavar="{0,1,2,3}",
         help="which streams go to the log files as well as the console: 1 stdout, 2 stderr, 3 both "
              "(default 3 with --log-dir; without it, a temporary folder)")
    flag("local-ranks-filter", default=None, metavar="LIST",
         help="show only these local ranks' output on the console, e.g. 0 or 0,2")
    flag("grace-period", type=seconds, default=5.0, metavar="S",
         help=f"seconds between SIGTERM and SIGKILL when stopping ranks, 0..{MAX_SECONDS}; a stop asked by a signal "
              "waits twice the longest step (or evaluation batch, or save) a rank has reported as well, so that it "
              "can save")
    flag("stall-timeout", type=seconds, default=180.0, metavar="S",
         help="stop the job when a rank sends no heartbeat for S seconds (stopped or frozen), or its heartbeats say "
              "it made no progress for S seconds while waiting for no other rank (blocked); cutrain train sends them, "
              f"other programs are not watched; default 180; 0: never, e.g. to attach a debugger; "
              f"else 0.5..{MAX_SECONDS}")
    flag("max-restarts", type=whole_number, default=0, metavar="N",
         help=f"after a rank fails, stop every rank of this node and start them again, at most N times "
              f"(0..{MAX_RESTARTS}); on several nodes, give every node the same N (Note [Restarts on several nodes]); "
              "give the program its own resume, e.g. cutrain train --save DIR --resume auto")
    flag("restart-delay", type=seconds, default=1.0, metavar="S",
         help=f"seconds to wait before each restart, 0..{MAX_SECONDS}; default 1")
    parser.add_argument("--version", action="version", help="print cutrun's version and commit, and exit",
                        version=f"cutrun {VERSION} (commit {COMMIT})" if not VERSION.startswith("@")
                        else "cutrun: no version (this copy was not written by CMake; build/bin/cutrun is)")
    parser.add_argument("program", help="the program to start in every process")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    # argparse would report a mistyped flag before the program as a missing program: name it.
    for arg in argv:
        if not arg.startswith("-"):
            break
        if arg.split("=")[0] not in parser._option_string_actions:
            fail(f"unrecognized arguments: {arg} (see cutrun --help)")
    return parser.parse_args(argv)


def expand_hostlist(text):
    """Slurm's compressed host list in full: "gpu[01-02,07],login2" -> gpu01 gpu02 gpu07 login2.
    The rules of dist/launch/slurm.cpp, which cutrain follows under srun; the tests check both agree."""
    name = r"(?:[^,\[\]]|\[[^\[\]]*\])+"
    if not re.fullmatch(f"{name}(?:,{name})*", text):
        raise ValueError("not a Slurm host list")
    hosts = []
    for host in re.findall(name, text):
        parts = re.split(r"\[([^\]]*)\]", host)  # text, ranges, text, ranges, ..., text
        choices = [[part] if i % 2 == 0 else expand_ranges(part) for i, part in enumerate(parts)]
        hosts += ["".join(combination) for combination in itertools.product(*choices)]
    return hosts


def expand_ranges(ranges):
    """What a bracket stands for: "01-03,7" -> 01 02 03 7. A range is as wide as its first number."""
    numbers = []
    for one in ranges.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", one)
        if not match or int(match[2] or match[1]) < int(match[1]):
            raise ValueError(f"'{one}' is not a range")
        low, high = int(match[1]), int(match[2] or match[1])
        numbers += [str(n).zfill(len(match[1])) for n in range(low, high + 1)]
    return numbers


def slurm_defaults(args):
    """Under srun, one cutrun per node: nodes, node rank, master and run id from Slurm's variables."""
    env = os.environ
    if args.standalone or "SLURM_PROCID" not in env:
        return
    tasks = int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1")))
    nodes = int(env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", "1")))
    if tasks != nodes:
        fail(f"under srun, cutrun runs once per node and starts the ranks itself, but this step has {tasks} tasks "
             f"on {nodes} node(s): use srun --ntasks-per-node=1 cutrun ..., or srun without cutrun")
    if args.nnodes is None:
        args.nnodes = nodes
    if args.node_rank is None:
        args.node_rank = int(env.get("SLURM_NODEID", "0"))
    if args.master_addr is None:
        variable = next((v for v in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST") if env.get(v)), None)
        if variable is None:
            fail("under srun but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set: give --master-addr")
        try:
            args.master_addr = expand_hostlist(env[variable])[0]
        except ValueError as e:
            fail(f"{variable}={env[variable]}: {e}")
    job = env.get("SLURM_JOB_ID")
    if job:
        if args.master_port is None:
            args.master_port = 10000 + int(job) % 20000  # as cutrain's dist/launch/env.cpp
        if args.rdzv_id is None and not env.get("CUTRAIN_RUN_ID"):
            args.rdzv_id = f"slurm-{job}.{env.get('SLURM_STEP_ID', env.get('SLURM_STEPID', '0'))}"
    sys.stderr.write(f"cutrun: under srun: node {args.node_rank} of {args.nnodes}, master {args.master_addr}"
                     f"{'' if args.master_port is None else f':{args.master_port}'}\n")


def free_port():
    """A port nobody listens on now (torchrun's --standalone does the same)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(args):
    """Turns the flags into a plan, or stops with one line naming the bad flag."""
    slurm_defaults(args)
    args.nnodes = 1 if args.nnodes is None else args.nnodes
    args.node_rank = 0 if args.node_rank is None else args.node_rank
    args.master_addr = "127.0.0.1" if args.master_addr is None else args.master_addr
    args.master_port = 29500 if args.master_port is None else args.master_port
    if args.max_restarts > MAX_RESTARTS:
        fail(f"--max-restarts {args.max_restarts}: must be 0..{MAX_RESTARTS}")
    if not 0 <= args.restart_delay <= MAX_SECONDS:
        fail(f"--restart-delay {args.restart_delay:g}: must be 0..{MAX_SECONDS} seconds")
    if args.rdzv_timeout is not None and not 0 < args.rdzv_timeout <= MAX_SECONDS:
        fail(f"--rdzv-timeout {args.rdzv_timeout:g}: must be above 0 and at most {MAX_SECONDS} seconds")
    if not 1 <= args.nproc_per_node <= MAX_NPROC_PER_NODE:
        fail(f"--nproc-per-node {args.nproc_per_node}: must be 1..{MAX_NPROC_PER_NODE}")
    if not 1 <= args.nnodes <= MAX_WORLD_SIZE // args.nproc_per_node:
        fail(f"--nnodes {args.nnodes}: must be 1..{MAX_WORLD_SIZE // args.nproc_per_node} "
             f"(at most {MAX_WORLD_SIZE} processes in all)")
    if not 0 <= args.node_rank < args.nnodes:
        fail(f"--node-rank {args.node_rank}: must be in 0..{args.nnodes - 1} for --nnodes {args.nnodes}")
    if args.standalone:
        if args.nnodes != 1:
            fail("--standalone runs on one node; drop --nnodes or --standalone")
        args.master_addr, args.master_port = "127.0.0.1", free_port()
    if not 1 <= args.master_port <= 65535:
        fail(f"--master-port {args.master_port}: not a port (1..65535)")
    if not 0 <= args.grace_period <= MAX_SECONDS:
        fail(f"--grace-period {args.grace_period:g}: must be 0..{MAX_SECONDS} seconds")
    if not (args.stall_timeout == 0 or 0.5 <= args.stall_timeout <= MAX_SECONDS):
        fail(f"--stall-timeout {args.stall_timeout:g}: must be 0 (never) or 0.5..{MAX_SECONDS} seconds")
    choose_run_id(args)
    shown = set(range(args.nproc_per_node))
    if args.local_ranks_filter is not None:
        try:
            shown = {int(r) for r in args.local_ranks_filter.split(",")}
        except ValueError:
            fail(f"--local-ranks-filter {args.local_ranks_filter}: not a comma-separated list of local ranks")
        if not shown <= set(range(args.nproc_per_node)):
            fail(f"--local-ranks-filter {args.local_ranks_filter}: local ranks go 0..{args.nproc_per_node - 1}")
    args.shown = shown
    program = args.program if os.sep in args.program else shutil.which(args.program)
    beside = os.path.join(os.path.dirname(os.path.realpath(__file__)), args.program)
    if program is None and os.sep not in args.program and os.path.isfile(beside):
        program = args.program = beside  # cutrun and cutrain are built and installed side by side
    if program is None or not os.path.isfile(program):
        fail(f"program '{args.program}' not found")
    if not os.access(program, os.X_OK):
        fail(f"program '{args.program}' is not executable")
    if args.tee is not None and args.log_dir is None:
        args.log_dir = tempfile.mkdtemp(prefix="cutrun-")  # as torchrun: --tee alone logs to a fresh folder
        sys.stderr.write(f"cutrun: --tee {args.tee}: the ranks' logs go to {args.log_dir}\n")
    args.logged = {1: ("stdout",), 2: ("stderr",), 3: ("stdout", "stderr"), 0: ()}[3 if args.tee is None else args.tee]
    if args.log_dir is not None:
        try:
            os.makedirs(args.log_dir, exist_ok=True)
        except OSError as e:
            fail(f"--log-dir {args.log_dir}: {e.strerror}")


MAX_RUN_ID_BYTES = 1024
MAX_RESTARTS = 1000


def choose_run_id(args):
    """The run id is the job's secret: whoever knows it may talk to the store. Node 0 draws one when
    none is given and prints the command that brings the other nodes into this run."""
    if args.rdzv_id is None:
        args.rdzv_id = os.environ.get("CUTRAIN_RUN_ID") or None
    if args.rdzv_id is not None:
        # A join carries the id, and the store reads at most 4 KiB of a connection before its join.
        if len(args.rdzv_id.encode()) > MAX_RUN_ID_BYTES:
            fail(f"--rdzv-id (or CUTRAIN_RUN_ID): {len(args.rdzv_id.encode())} bytes; a run id has at most "
                 f"{MAX_RUN_ID_BYTES}")
        return
    if args.node_rank != 0:
        fail(f"--rdzv-id: node {args.node_rank} needs the run id of node 0; run the command node 0 printed")
    args.rdzv_id = secrets.token_hex(16)
    if args.nnodes > 1:
        others = (f"CUTRAIN_RUN_ID={args.rdzv_id} cutrun --nnodes {args.nnodes} --node-rank <1..{args.nnodes - 1}> "
                  f"--nproc-per-node {args.nproc_per_node} --master-addr {shlex.quote(args.master_addr)} "
                  f"--master-port {args.master_port} {shlex.join([args.program] + args.args)}")
        sys.stderr.write(f"cutrun: on the other nodes, run:\n  {others}\n")
        sys.stderr.flush()


def rank_environment(args, rank, local_rank, restart):
    env = dict(os.environ)
    env["CUTRAIN_ERROR_FILE"] = os.path.join(args.error_dir, f"rank{rank}")  # app/run_end.h
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(args.nnodes * args.nproc_per_node),
        LOCAL_WORLD_SIZE=str(args.nproc_per_node),
        GROUP_RANK=str(args.node_rank),
        GROUP_WORLD_SIZE=str(args.nnodes),
        MASTER_ADDR=args.master_addr,
        MASTER_PORT=str(args.master_port),
        CUTRAIN_RUN_ID=args.rdzv_id,
        # torchrun's count of this node's restarts, which the rank sends in its store join (Note [A
        # newer group ends an older one] in dist/launch/store_state.h).
        TORCHELASTIC_RESTART_COUNT=str(restart),
    )
    if args.rdzv_timeout is not None:
        env["CUTRAIN_RDZV_TIMEOUT"] = f"{args.rdzv_timeout:g}"
    if args.store_bind is not None:
        env["CUTRAIN_STORE_BIND"] = args.store_bind
    if args.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"  # as torchrun: N processes should not each take every core
    return env


class ProgressWatch:
    """cutrun's side of dist/launch/progress_report.h. A rank that reports sends
    "<rank> <step> <longest_ms> <quiet_ms>" every `every` seconds from a thread of its own. One that
    falls silent for the stall timeout is stopped or frozen; one whose heartbeats say it has been
    quiet that long is blocked (its training thread has reached no point where it can stop, and it
    waits for no peer: Note [A heartbeat means progress]). The others, waiting for it inside a
    collective, are never quiet. A rank that never reports is never judged. `longest_ms` is the
    longest the rank has gone between points where it can act on a stop (a step, an evaluation
    batch, a save), which a stop that saves waits for (Note [A stop that saves])."""

    def __init__(self, stall_timeout):
        self.stall_timeout = stall_timeout
        self.every = min(1.0, max(0.05, stall_timeout / 8))
        self.inbox, self.rank_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.heard = {}  # rank -> (when its last heartbeat came, its step, its quiet seconds then)
        self.longest = {}  # rank -> the longest gap it reported, seconds
        self.ended = set()  # ranks that exited: silent, not stalled
        self.lock = threading.Lock()

    def environment(self):
        return {"CUTRAIN_PROGRESS_FD": str(self.rank_end.fileno()),
                "CUTRAIN_PROGRESS_EVERY_MS": str(round(self.every * 1000))}

    def longest_gap(self):
        """The longest any rank has gone between two points where it can stop, in seconds."""
        with self.lock:
            return max(self.longest.values(), default=0.0)

    def forget(self, rank):
        with self.lock:
            self.ended.add(rank)
            self.heard.pop(rank, None)

    def watch(self, on_stall):
        """Runs on a thread of its own until a rank stalls: then on_stall(rank, silent_for, quiet_for,
        step, others), with quiet_for None when the rank fell silent."""
        self.rank_end.close()  # the ranks hold it now
        self.inbox.settimeout(self.every)
        last_look = time.monotonic()
        while True:
            try:
                rank, step, *more = (int(word) for word in self.inbox.recv(64).split())
            except (socket.timeout, ValueError):
                rank = None
            now = time.monotonic()
            with self.lock:
                if rank is not None and rank not in self.ended:
                    longest_ms, quiet_ms = (more + [0, 0])[:2]
                    self.heard[rank] = (now, step, quiet_ms / 1000)
                    self.longest[rank] = longest_ms / 1000
                if now - last_look > self.stall_timeout / 2:
                    # cutrun itself did not run for a while (stopped, a suspended machine): the
                    # silence is not the ranks'. Start their clocks afresh.
                    self.heard = {r: (now, s, 0.0) for r, (_, s, _) in self.heard.items()}
                last_look = now
                for rank, (when, step, quiet) in self.heard.items():
                    silent = now - when > self.stall_timeout
                    if silent or quiet > self.stall_timeout:
                        others = [s for r, (_, s, _) in self.heard.items() if r != rank]
                        return on_stall(rank, now - when, None if silent else quiet, step,
                                        max(others, default=None))


def die_with(launcher_pid):
    """A rank's preexec_fn, run between fork and exec: the kernel sends the rank SIGKILL when the
    launcher dies, however it dies (a SIGKILL cannot be caught and passed on), so no rank outlives
    cutrun. The launcher may have died before prctl: then the rank goes at once."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the child only calls it
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def preexec():
        libc.prctl(pr_set_pdeathsig, sigkill)
        if os.getppid() != launcher_pid:
            os._exit(1)
    return preexec


class Sink:
    """Where copied output goes: a console or a log file. One that stops taking writes (a closed
    pipe, a full disk) is said once and then dropped; the copier goes on reading the rank's pipe,
    so the rank never blocks on a full one."""

    def __init__(self, file, what, after):
        self.file, self.what, self.after = file, what, after
        self.failed = False

    def write(self, data):
        if self.failed:
            return
        try:
            self.file.write(data)
            self.file.flush()
        except OSError as e:
            self.failed = True
            warn(f"{self.what} ({e.strerror or e}); {self.after}")

    def close(self):
        try:
            self.file.close()
        except OSError:
            pass


def warn(message):
    """A line on cutrun's stderr, if it still takes one."""
    try:
        sys.stderr.write(f"cutrun: warning: {message}\n")
        sys.stderr.flush()
    except OSError:
        pass


class Consoles:
    """cutrun's stdout and stderr as sinks, shared by every rank's copiers."""

    def __init__(self):
        self.stdout = Sink(sys.stdout.buffer, "cannot write to standard output",
                           "the ranks' standard output is dropped from now on")
        self.stderr = Sink(sys.stderr.buffer, "cannot write to standard error",
                           "the ranks' standard error is dropped from now on")


consoles = Consoles()


class LogError(Exception):
    pass


def create_log(path):
    """A rank's log, created afresh and never written through a symbolic link planted at its name:
    what has the name already (an earlier job's log, a link) is unlinked first."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            return os.fdopen(os.open(path, flags, 0o644), "wb")
        except FileExistsError:
            os.unlink(path)
            return os.fdopen(os.open(path, flags, 0o644), "wb")
    except OSError as e:
        raise LogError(f"--log-dir: cannot create {path}: {e.strerror}")


class Rank:
    """One started process and the threads copying its output."""

    def __init__(self, args, local_rank, restart, console_lock, watch):
        self.local_rank = local_rank
        self.rank = args.node_rank * args.nproc_per_node + local_rank
        self.log = None
        if args.log_dir:
            path = os.path.join(args.log_dir, f"rank{self.rank}.log")
            self.log = Sink(create_log(path), f"--log-dir: cannot write {path}",
                            "the rank's output goes on to the console")
        env = rank_environment(args, self.rank, local_rank, restart)
        if watch is not None:
            env.update(watch.environment())
        # A session of its own: a signal to the rank reaches its children too, and the terminal's
        # Ctrl-C reaches only cutrun, which passes it on. It dies with cutrun. (Started from the main
        # thread, which lives as long as cutrun: the kernel ties the death signal to that thread.)
        self.process = subprocess.Popen([args.program] + args.args, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True,
                                        preexec_fn=die_with(os.getpid()),
                                        pass_fds=(watch.rank_end.fileno(),) if watch is not None else ())
        show = local_rank in args.shown
        self.copiers = [threading.Thread(target=self.copy, args=(pipe, console if show else None,
                                                                 name in args.logged, console_lock))
                        for pipe, console, name in ((self.process.stdout, consoles.stdout, "stdout"),
                                                    (self.process.stderr, consoles.stderr, "stderr"))]
        for copier in self.copiers:
            copier.start()

    # The longest piece of a line held at once: a longer line (a program that never writes a newline)
    # passes through in pieces of this size, each its own line on the console, unchanged in the log.
    LONGEST_PIECE = 1 << 16

    def copy(self, pipe, console, logged, lock):
        prefix = f"[rank{self.rank}]: ".encode()
        for line in iter(lambda: pipe.readline(self.LONGEST_PIECE), b""):
            with lock:
                if console is not None:
                    console.write(prefix + line + (b"" if line.endswith(b"\n") else b"\n"))
                if self.log is not None and logged:
                    self.log.write(line)
        pipe.close()

    def signal(self, signum):
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass  # already gone

    def close(self):
        for copier in self.copiers:
            copier.join()
        if self.log is not None:
            self.log.close()


def first_failure_recorded(ranks, first_to_exit, error_dir):
    """Which rank failed first, with its message: the failed rank whose error file
    (app/run_end.h) holds the earliest time, when the first to exit wrote one too and it is
    later. A first to exit that wrote none (killed by a signal, a crash) gave no time to compare:
    it stays the one named. (None, None) when nothing says otherwise."""
    found = {}
    for r in ranks:
        if r.process.returncode in (0, None):
            continue
        try:
            with open(os.path.join(error_dir, f"rank{r.rank}"), encoding="utf-8", errors="replace") as f:
                when, _, message = f.readline().rstrip("\n").partition(" ")
            found[r] = (int(when), message)
        except (OSError, ValueError):
            pass
    if first_to_exit not in found:
        return None, None
    r = min(found, key=lambda r: found[r][0])
    return (r, found[r][1]) if r is not first_to_exit else (None, None)


def describe_exit(status):
    if status < 0:
        return f"was killed by signal {signal.Signals(-status).name}"
    return f"exited with code {status}"


# Signals that arrive within this many seconds of the first are the same request (a scheduler's
# SIGTERM next to a terminal's SIGINT, a key held down): one stop, not a second "kill now".
SIGNALS_TOGETHER_S = 1.0


def main(argv):
    args = parse_args(argv)
    check(args)
    args.error_dir = tempfile.mkdtemp(prefix="cutrun-errors-")  # 0700: the ranks' failure records
    try:
        return run_job(args)
    finally:
        shutil.rmtree(args.error_dir, ignore_errors=True)


def run_job(args):
    """Starts the ranks, and again after failures as --max-restarts allows; returns cutrun's exit status."""
    console_lock = threading.Lock()
    ranks = []
    stopping = threading.Event()
    received = []  # the signal that asked cutrun to stop, if one did, and when: (signum, monotonic time)
    watching = []  # the ProgressWatch of the group that runs now, if any
    stop = {}  # the stop under way, once stop_all has begun one: its group of ranks and its signal

    # Note [A stop that saves]
    # ~~~~~~~~~~~~~~~~~~~~~~~~
    # A rank acts on a stop only between steps (or evaluation batches),
    # and then writes a checkpoint; a CPU step can take longer than the grace period. So a stop
    # that cutrun passes on (SIGINT, SIGTERM, SIGHUP, SIGUSR1) waits the grace period plus twice the
    # longest gap between such points that any rank has reported in its heartbeats: one to reach the
    # next point, one for the save. A report may be one heartbeat period old, so the wait has that
    # period too, and a gap reported during the wait lengthens it. A stop after a failure waits the
    # grace period alone: the others cannot save without the failed rank. A rank still there after
    # the wait is named.
    def stop_all(signum, asked=False):
        """`signum` to every rank now, SIGKILL to what is left after the wait."""
        if stopping.is_set():
            return
        stopping.set()
        group = list(ranks)  # these ranks alone, and any whose start it interrupted: a restart starts others
        stop.update(group=group, signum=signum)
        for r in group:
            r.signal(signum)
        started = time.monotonic()
        watch = watching[0] if asked and watching else None

        def wait():
            return args.grace_period + (watch.every + 2 * watch.longest_gap() if watch else 0.0)

        def kill_later(seconds):
            killer = threading.Timer(seconds, kill_what_is_left)
            killer.daemon = True
            killer.start()

        def kill_what_is_left():
            left = started + wait() - time.monotonic()
            if left > 0:  # a rank reported a longer gap meanwhile
                return kill_later(left)
            for r in group:
                if r.process.returncode is None:
                    outcome = ": no checkpoint written" if asked else ""
                    sys.stderr.write(f"cutrun: rank {r.rank} (local rank {r.local_rank}, pid {r.process.pid}) did not "
                                     f"stop within {wait():.1f} s of {signal.Signals(signum).name}; killing it"
                                     f"{outcome}\n")
                    r.signal(signal.SIGKILL)
        kill_later(wait())

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        if received and time.monotonic() - received[0][1] < SIGNALS_TOGETHER_S:
            sys.stderr.write(f"cutrun: got {name} within {SIGNALS_TOGETHER_S:g} s of "
                             f"{signal.Signals(received[0][0]).name}: the same stop\n")
            return
        if stopping.is_set():  # a second Ctrl-C: no more waiting
            sys.stderr.write(f"cutrun: got {name} again; killing every rank\n")
            for r in ranks:
                r.signal(signal.SIGKILL)
            return
        received.append((signum, time.monotonic()))
        if signum in (signal.SIGINT, signal.SIGTERM):
            sys.stderr.write(f"cutrun: got {name}; passing it to every rank\n")
            stop_all(signum, asked=True)
        else:  # SIGHUP (a closed terminal or session) and SIGUSR1 stop the job as SIGTERM does, saving
            sys.stderr.write(f"cutrun: got {name}; passing SIGTERM to every rank\n")
            stop_all(signal.SIGTERM, asked=True)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(signum, on_signal)

    def run_group(restart):
        """Starts every rank, at restart `restart` (0: the first start), waits for them all; returns (the
        rank that failed, or None, its code)."""
        stopping.clear()
        ranks.clear()
        for name in os.listdir(args.error_dir):  # an earlier attempt's
            os.unlink(os.path.join(args.error_dir, name))
        watch = ProgressWatch(args.stall_timeout) if args.stall_timeout > 0 else None
        watching[:] = [watch] if watch is not None else []
        try:
            for local_rank in range(args.nproc_per_node):
                if stopping.is_set():
                    break  # told to stop while starting: start no more
                rank = Rank(args, local_rank, restart, console_lock, watch)
                ranks.append(rank)
                # A signal handled while this rank started (its output may already be read) stopped the
                # ranks listed then: this one joins that stop, its signal and its kill after the wait.
                if stopping.is_set() and rank not in stop["group"]:
                    stop["group"].append(rank)
                    rank.signal(stop["signum"])
        except LogError as e:
            stop_all(signal.SIGTERM)
            fail(str(e))
        except OSError as e:
            stop_all(signal.SIGTERM)
            fail(f"cannot start '{args.program}': {e.strerror}")

        stalled = []  # the rank the watch found stalled, if it did

        def on_stall(rank, silent_for, quiet_for, step, others_step):
            """A stalled rank is named and killed (it cannot act on SIGTERM), then the job stops."""
            r = next(r for r in ranks if r.rank == rank)
            if stopping.is_set():
                return
            stalled.append(r)
            others = f"; the others are at step {others_step}" if others_step is not None else ""
            what = (f"sent no heartbeat for {silent_for:.1f} s, at step {step}{others} (stopped or frozen?)"
                    if quiet_for is None else
                    f"made no progress for {quiet_for:.1f} s, at step {step}{others}, waiting for no other rank "
                    f"(blocked, say writing to a full pipe?)")
            sys.stderr.write(f"cutrun: rank {rank} (local rank {r.local_rank}, pid {r.process.pid}, host "
                             f"{socket.gethostname()}) {what}; killing it and stopping the other ranks\n")
            r.signal(signal.SIGKILL)
            stop_all(signal.SIGTERM)

        if watch is not None:
            threading.Thread(target=watch.watch, args=(on_stall,), daemon=True).start()

        # Wait for the ranks in the order they end; the first failure stops the others.
        by_pid = {r.process.pid: r for r in ranks}
        first_failure = None
        while by_pid:
            pid, status = os.wait()
            r = by_pid.pop(pid, None)
            if r is None:
                continue
            r.process.returncode = os.waitstatus_to_exitcode(status)
            if watch is not None:
                watch.forget(r.rank)
            if r.process.returncode != 0 and first_failure is None and not received and not stalled:
                first_failure = r
                sys.stderr.write(f"cutrun: rank {r.rank} (local rank {r.local_rank}, pid {pid}) "
                                 f"{describe_exit(r.process.returncode)}; stopping the other ranks\n")
                stop_all(signal.SIGTERM)
        for r in ranks:
            r.close()
        # The first to exit is not always the first to fail: a rank whose collective broke because
        # another left may exit before it. The ranks' own records say who failed first.
        root, message = first_failure_recorded(ranks, first_failure, args.error_dir)
        if root is not None:
            sys.stderr.write(f"cutrun: rank {root.rank} (local rank {root.local_rank}, pid {root.process.pid}) failed "
                             f"first, and {describe_exit(root.process.returncode)}: {message}\n")
            first_failure = root
        if stalled:
            first_failure = stalled[0]
        if first_failure is None:
            return None, 0
        code = first_failure.process.returncode
        return first_failure, code if code > 0 else 128 - code

    # Note [Restarts on several nodes]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Each node's cutrun restarts its own ranks. A rank that fails
    # on one node breaks the collectives of every other rank, which then fail too, so every node's
    # cutrun restarts its group, once per failure, and the new groups meet at rank 0's new store
    # (a rank that comes before it retries until --rdzv-timeout). With one --save folder that every
    # node sees, they all resume from the same checkpoint (cutrain train checks that they do). A rank
    # whose Gloo send waits on a peer that died is never told, and would fail only at its collective
    # timeout; but every rank is told its restart count (TORCHELASTIC_RESTART_COUNT), and a restarted
    # rank that joins rank 0's old store ends that store's process, so that node restarts too (Note
    # [A newer group ends an older one] in dist/launch/store_state.h). --restart-delay need not wait for
    # the collective timeout.
    for attempt in itertools.count():
        failed, code = run_group(attempt)
        if failed is None or received or attempt == args.max_restarts:
            break
        sys.stderr.write(f"cutrun: restart {attempt + 1} of {args.max_restarts} in {args.restart_delay:g} s, after "
                         f"rank {failed.rank} {describe_exit(failed.process.returncode)}: starting every rank "
                         f"again, which resume as their flags say\n")
        time.sleep(args.restart_delay)
        if received:
            break
    if failed is not None:
        return code
    # A stop that the user asked of the whole job succeeded when every rank saved and exited 0: the
    # job exits 0, as a rank stopped alone does, so that a `set -e` script goes on. A rank that had to
    # be killed, or died of the signal (before the rendezvous, say), makes it 128 + the signal.
    if received and any(r.process.returncode != 0 for r in ranks):
        return 128 + received[0][0]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
