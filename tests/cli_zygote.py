"""A fork server ("zygote") for fairseq's console scripts, so the suite's many tiny runs do not
each pay the imports of torch, fairseq and fairseq-ext (about 3.5 of the 4-5 s a tiny run takes
on a 2-core machine).

Three parts, in this one module (its top level imports the standard library only):

* **The server** (``python tests/cli_zygote.py SOCKET``, started once per pytest process by
  :class:`CliZygote`): imports what the CLIs import, fairseq-ext through fairseq's own
  ``import_user_module`` as ``--user-dir`` does, then accepts requests on a Unix socket.
* **The shims**: one executable per console script of :data:`CLI_MODULES` in a folder the tests
  put first (``FAIRSEQ_BIN``, which the recipes read, and ``conftest.fairseq_cli``). A shim runs
  ``python -S`` (milliseconds), sends its argv, working directory, environment and its stdin,
  stdout and stderr (the file descriptors themselves) to the server, and exits with the run's
  status; a signal it receives is passed on to the run, and a shim killed outright takes its
  run with it.
* **The run**: for each request the server forks a child, which forks the run itself: a fresh
  process whose stdio are the shim's, in the shim's directory and environment, that re-executes
  the CLI's module (its ``logging.basicConfig`` runs with this process's stdout, as in a fresh
  start), installs what importing fairseq-ext installs under that argv (one-line errors), and
  calls the module's ``cli_main``, exactly as the console script does.

A request the server cannot serve exactly as a fresh process would is declined, and the shim
``exec``-s the real console script instead: a ``fairseq-train``/``fairseq-validate`` without
``--user-dir`` naming this checkout's ``fairseq_ext`` (a fresh process would not have the plugin
registered), a hydra config that does not load the plugin, hydra's ``--multirun``, an
environment whose ``PYTHON*`` variables differ from the server's (``PYTHONPATH``,
``PYTHONHASHSEED``, ``PYTHONWARNINGS`` ...: the interpreter reads them as it starts, and the
server started long ago), or a server that is not there (``FAIRSEQ_EXT_TEST_CLI_SOCKET`` unset).
Tests that check the console script itself (a second installed copy, ``--help`` of a bare
fairseq) therefore run the real one. The server's log (``CliZygote.log``) has a line per
request: ``served: CLI ARGS  # TEST``, or ``declined: CLI ARGS  # TEST  [REASON]``.

What a served run shares with the server and a fresh process would not: the hash seed of
``str`` and ``bytes`` (the server's ``PYTHONHASHSEED``, random where unset: two served runs
have the same, two fresh ones do not), and the state the imports left (the same as a fresh
process's once its imports are done). Tests whose point is what separate processes do
(determinism, exact resume, kills) run real processes (``tests/conftest.py``, ``unserved``).
"""
import json
import os
import select
import signal
import socket
import struct
import sys

#: The environment variable that names the server's socket (set by :class:`CliZygote`).
SOCKET_ENV = "FAIRSEQ_EXT_TEST_CLI_SOCKET"
#: The console scripts the server runs, and the module whose ``cli_main`` each one calls.
CLI_MODULES = {"fairseq-train": "fairseq_cli.train", "fairseq-validate": "fairseq_cli.validate",
               "fairseq-hydra-train": "fairseq_cli.hydra_train",
               "fairseq-preprocess": "fairseq_cli.preprocess"}
#: The interpreter's names: ``python -m fairseq_ext.X ...`` and ``python SCRIPT.py ...`` of a
#: script that imports fairseq_ext run in the server too (:func:`python_target`).
PYTHON_NAMES = ("python", "python3")
MODULE_CLIS = {module: cli for cli, module in CLI_MODULES.items()}
#: Console scripts that import the plugin only when told to (``--user-dir``, a hydra config).
PLUGIN_WHEN_ASKED = ("fairseq-train", "fairseq-validate", "fairseq-hydra-train")
#: Signals a shim passes on to its run.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                     signal.SIGUSR2, signal.SIGQUIT)
HEADER = struct.Struct("!I")
#: The server's ``sys.path`` without its first entry (tests/), taken before the plugin's import.
BASE_SYS_PATH = []
#: The server's ``PYTHON*`` environment variables, as it started (:func:`python_environment`).
SERVER_PYTHON_ENV = {}


# --------------------------------------------------------------------------------- the shim

def shim_main(cli: str, real: str) -> None:
    """A shim's whole program: have the server run ``cli``, or ``exec`` the real ``real``."""
    path = os.environ.get(SOCKET_ENV)
    conn = None
    if path:
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(path)
        except OSError:
            conn = None
    if conn is None:
        os.execv(real, [real, *sys.argv[1:]])
    request = json.dumps({"cli": cli, "argv0": real, "args": sys.argv[1:], "cwd": os.getcwd(),
                          "env": dict(os.environ)}).encode()
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    socket.send_fds(conn, [HEADER.pack(len(request))], fds)
    conn.sendall(request)

    def forward(signum, _frame):
        try:
            conn.sendall(b"%d\n" % signum)
        except OSError:
            pass

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            sys.stderr.write("cli_zygote: the server died during the run\n")
            os._exit(70)
        reply += chunk
    answer = json.loads(reply)
    if answer.get("fallback"):
        conn.close()
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        os.execv(real, [real, *sys.argv[1:]])
    status = answer["status"]
    if status < 0:  # the run was killed by a signal: so is the shim, as its exit status says
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


SHIM = """#!{python} -S
import sys
sys.path.insert(0, {tests!r})
from cli_zygote import shim_main
shim_main({cli!r}, {real!r})
"""


def write_shims(folder: str, bin_dir: str) -> None:
    """``folder``: a shim per :data:`CLI_MODULES` entry, and for every other program of
    ``bin_dir`` (``python``, ``pip`` ...: what a recipe finds in ``FAIRSEQ_BIN``) a one-line
    script that runs it."""
    os.makedirs(folder, exist_ok=True)
    tests = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(bin_dir)):
        real = os.path.join(bin_dir, name)
        if not (os.path.isfile(real) and os.access(real, os.X_OK)):
            continue
        if name in CLI_MODULES or name in PYTHON_NAMES:
            text = SHIM.format(python=sys.executable, tests=tests, cli=name, real=real)
        else:
            text = f'#!/bin/sh\nexec "{real}" "$@"\n'
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)


# -------------------------------------------------------------------------------- the server

def option_value(args, flag):
    """The value of ``flag`` in ``args`` (``--flag V`` or ``--flag=V``), else None."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def python_target(args, cwd):
    """``("module", NAME)`` for ``python -m fairseq_ext...`` or ``python -m fairseq_cli.X`` (a
    console script of :data:`CLI_MODULES`), ``("script", PATH)`` for ``python PATH.py`` whose
    text imports fairseq_ext; None for any other interpreter command (``-c``, flags, a script
    that does not import the plugin: a fresh interpreter would not have it)."""
    if len(args) >= 2 and args[0] == "-m" and (args[1].split(".")[0] in ("fairseq_ext", "fairseq_ext_lab")
                                               or args[1] in MODULE_CLIS):
        return ("module", args[1])
    if args and args[0].endswith(".py") and not args[0].startswith("-"):
        path = os.path.join(cwd, args[0])
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            return None
        if "import fairseq_ext" in text or "from fairseq_ext" in text:
            return ("script", path)
    return None


def loads_this_plugin(request, plugin_dir: str) -> bool:
    """Whether a fresh process of the request imports this checkout's fairseq-ext at start, so
    that a run forked from the server (which has it imported) is the same run."""
    cli, args, cwd = request["cli"], request["args"], request["cwd"]
    if cli in PYTHON_NAMES:
        target = python_target(args, cwd)
        if target is not None and target[1] in MODULE_CLIS:  # python -m fairseq_cli.train ...
            return loads_this_plugin({"cli": MODULE_CLIS[target[1]], "args": args[2:],
                                      "cwd": cwd}, plugin_dir)
        return target is not None
    if cli not in PLUGIN_WHEN_ASKED:
        return True  # fairseq-preprocess: it never reads the plugin's registries
    if cli == "fairseq-hydra-train":
        if "-m" in args or "--multirun" in args:
            return False
        user_dir = next((a.split("=", 1)[1] for a in args if a.startswith("common.user_dir=")),
                        None)
        if user_dir is None:
            config_dir, name = option_value(args, "--config-dir"), option_value(args,
                                                                                  "--config-name")
            if not (config_dir and name):
                return False
            path = os.path.join(cwd, config_dir, name if name.endswith(".yaml") else f"{name}.yaml")
            try:
                with open(path) as f:
                    return "fairseq_ext" in f.read()
            except OSError:
                return False
    else:
        user_dir = option_value(args, "--user-dir")
        if user_dir is None:
            return False
    return os.path.realpath(os.path.join(cwd, user_dir)) == os.path.realpath(plugin_dir)


def python_environment(env) -> dict:
    """The ``PYTHON*`` variables of ``env``: what the interpreter reads as it starts."""
    return {name: value for name, value in env.items() if name.startswith("PYTHON")}


def decline_reason(request, plugin_dir: str, server_env: dict):
    """None if the server runs ``request`` as a fresh process would, else why it declines it
    (``server_env``: the server's :func:`python_environment`)."""
    if not loads_this_plugin(request, plugin_dir):
        return "a fresh process would not load this checkout's plugin"
    env = python_environment(request["env"])
    differ = sorted(name for name in {*env, *server_env} if env.get(name) != server_env.get(name))
    if differ:
        return f"{', '.join(differ)} not the server's"
    return None


def run_request(request) -> int:
    """In the run's process: the console script's own entry point, as a fresh process runs it."""
    import importlib
    import random

    import numpy
    import torch

    from fairseq_ext.training.fused_kernels import log_fused_kernels

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["argv0"], *request["args"]]
    random.seed()  # a fresh process's unseeded generators differ from run to run
    numpy.random.seed()
    threads = os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(int(threads) if threads and threads.isdigit() else os.cpu_count())
    if request["cli"] in PYTHON_NAMES:
        return run_python(request)
    module = importlib.import_module(CLI_MODULES[request["cli"]])  # logging set up here
    if request["cli"] in PLUGIN_WHEN_ASKED:
        as_the_plugin_import_does(request["args"])
        if request["cli"] != "fairseq-hydra-train" and not {"-h", "--help"} & set(request["args"]):
            log_fused_kernels()  # logged where a fresh run imports the plugin (not for --help)
    return exit_code(module.cli_main)


def as_the_plugin_import_does(args) -> None:
    """In a run of a fairseq CLI given the plugin (``args``: the CLI's arguments, ``sys.argv``
    set): what a fresh process's import of fairseq_ext leaves behind. fairseq's
    ``import_user_module`` takes ``--user-dir`` as imported (it may be a link to the checkout's
    fairseq_ext, which the server imported by its own path), and the one-line errors are
    installed under this argv."""
    from fairseq.utils import import_user_module

    from fairseq_ext.cli.errors import install_one_line_errors
    from fairseq_ext.models.validation import fairseq_program

    user_dir = option_value(args, "--user-dir")
    if user_dir is not None:
        import_user_module.memo.add(os.path.abspath(user_dir))
    install_one_line_errors(fairseq_program())


def run_python(request) -> int:
    """``python -m fairseq_ext.X`` or ``python SCRIPT.py`` as a fresh interpreter runs it: its
    ``sys.path[0]`` the working directory or the script's, the module run as ``__main__``."""
    import runpy

    kind, target = python_target(request["args"], request["cwd"])
    if kind == "module":
        sys.argv = [target, *request["args"][2:]]
        sys.path[:] = [request["cwd"], *BASE_SYS_PATH]
        if MODULE_CLIS.get(target) in PLUGIN_WHEN_ASKED:  # python -m fairseq_cli.train --user-dir
            sys.argv[0] = os.path.join(os.path.dirname(__import__("fairseq_cli").__file__),
                                       target.split(".")[1] + ".py")
            as_the_plugin_import_does(request["args"][2:])
        return exit_code(lambda: runpy.run_module(target, run_name="__main__", alter_sys=True))
    sys.argv = [request["args"][0], *request["args"][1:]]
    sys.path[:] = [os.path.dirname(os.path.abspath(target)), *BASE_SYS_PATH]
    return exit_code(lambda: runpy.run_path(target, run_name="__main__"))


def exit_code(main) -> int:
    """Run ``main`` as the interpreter runs a program: its exit status, a ``sys.exit`` message
    or an uncaught exception printed, then as the interpreter ends: the non-daemon threads
    waited for (``threading._shutdown``: a run that a thread keeps alive stays alive, as a
    real process does), the ``atexit`` functions run, the output flushed."""
    import atexit
    import threading

    try:
        main()
        code = 0
    except SystemExit as stop:
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)  # sys.exit("message"), as Python prints it
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # what Python does with an uncaught exception
        code = 1
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def handle(conn, plugin_dir: str) -> None:
    """In a child of the server: read one request, decline it or fork its run, pass the shim's
    signals on, and send back the run's exit status."""
    header, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
    size, = HEADER.unpack(header)
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return
        data += chunk
    request = json.loads(data)
    reason = decline_reason(request, plugin_dir, SERVER_PYTHON_ENV)
    test = request["env"].get("PYTEST_CURRENT_TEST", "")  # which test started it
    print(f"{'declined' if reason else 'served'}: {request['cli']} {' '.join(request['args'])}"
          f"  # {test}{f'  [{reason}]' if reason else ''}", file=sys.stderr,
          flush=True)  # the server's log (CliZygote.log)
    if reason:
        conn.sendall(b'{"fallback": true}\n')
        return
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        code = 1
        try:
            code = run_request(request)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    pending = b""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            conn.sendall(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            return
        readable, _, _ = select.select([conn], [], [], 0.02)
        if readable:
            chunk = conn.recv(64)
            if not chunk:  # the shim is gone (killed): so is its run
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                os.kill(pid, int(line))


def serve(path: str) -> None:
    """The server: import once, then fork a handler per connection until stdin closes (the
    pytest process that started it has ended or closed it)."""
    import argparse
    import importlib
    import logging

    from fairseq.utils import import_user_module

    BASE_SYS_PATH[:] = sys.path[1:]  # a fresh interpreter's, but for this script's folder
    SERVER_PYTHON_ENV.update(python_environment(os.environ))
    plugin_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "fairseq_ext")
    for module in (*CLI_MODULES.values(), "torch._dynamo"):
        importlib.import_module(module)
    # --user-dir fairseq_ext, as a fresh fairseq-train imports it (its path memoized, as there)
    import_user_module(argparse.Namespace(user_dir=plugin_dir))
    from fairseq_ext.training.fused_kernels import log_fused_kernels

    log_fused_kernels.cache_clear()  # logged once per run, by the run (run_request)
    # The CLI modules run again in each run: their logging.basicConfig with the run's stdout.
    for module in CLI_MODULES.values():
        del sys.modules[module]
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)

    import gc

    gc.freeze()  # the imported objects out of the collector's reach: runs copy fewer pages
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped as they end
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return
        if listener in readable:
            conn, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                try:
                    handle(conn, plugin_dir)
                finally:
                    os._exit(0)
            conn.close()


class CliZygote:
    """The server and its shims, for one pytest process: :meth:`environment` is what a run's
    environment needs (``FAIRSEQ_BIN`` and the socket)."""

    def __init__(self, folder: str, bin_dir: str):
        import subprocess

        self.shims = os.path.join(folder, "bin")
        write_shims(self.shims, bin_dir)
        self.socket = os.path.join(folder, "zygote.sock")
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.pop(SOCKET_ENV, None)
        self.log = os.path.join(folder, "zygote.log")  # the server's own output (its imports)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), self.socket],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)
        if self.proc.stdout.readline() != b"ready\n":
            with open(self.log) as log:
                raise RuntimeError(f"the CLI zygote did not start (exit status "
                                   f"{self.proc.wait()}):\n{log.read()[-4000:]}")

    def environment(self) -> dict:
        return {"FAIRSEQ_BIN": self.shims, SOCKET_ENV: self.socket}

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


if __name__ == "__main__":
    serve(sys.argv[1])
