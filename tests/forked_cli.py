"""Run fairseq's CLIs as fresh processes without paying their imports each time.

A test that runs ``fairseq-train`` a dozen times spends most of each run importing torch,
fairseq and fairseq-ext (about 4 of the 5.5 s a tiny run takes on the 2-core CI machine).
:class:`ForkedCli` starts one server process that imports them once, then forks a child per
command; the child runs the console script's own entry point (``fairseq_cli.train.cli_main``
for ``fairseq-train``) with ``sys.argv`` set, its stdout and stderr in a log file, and exits.

Each run is a new process that holds nothing from the runs before it: the server only imports
modules (single-threaded, never trains), so a child starts from exactly the module state a
fresh ``fairseq-train`` has once its imports are done (the child installs the one-line error
printing that importing fairseq-ext installs under a fairseq CLI's argv, and an uncaught
exception goes to ``sys.excepthook`` as in any Python process). That matters to the tests that use it:
a resume that only worked because some state survived in memory would fail here as it fails
for a user.

Run as a script, this module is the server: one JSON request per line on stdin (``cli``,
``args``, ``log``, ``report_pid``), one JSON reply per line on stdout (``returncode``; first
``pid``, when the request asks for it, so that a test can kill the run).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

from cli_zygote import CLI_MODULES, exit_code  # the CLIs it runs, their modules

from fairseq_ext.cli.errors import install_one_line_errors
from fairseq_ext.models.validation import fairseq_program

#: Modules a run imports on first use, not at startup: torch's optimizers import dynamo (2 s).
LAZY_IMPORTS = ("torch._dynamo",)


class ForkedCli:
    """A server that forks a fresh fairseq CLI process per :meth:`run`; a context manager."""

    def __init__(self, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                                **(env or {})))

    def run(self, cli: str, args, log: Path, check: bool = True) -> str:
        """Run ``cli`` (a key of :data:`CLI_MODULES`) with ``args`` in a forked child; its
        stdout and stderr go to ``log``. Returns the log's text; raises with its tail when
        the run fails and ``check``."""
        request = self._send(cli, args, log, report_pid=False)
        returncode = self._reply()["returncode"]
        output = Path(log).read_text()
        if check and returncode != 0:
            raise AssertionError(f"{cli} {' '.join(request['args'])} failed ({returncode}):\n"
                                 f"{output[-6000:]}")
        return output

    def start(self, cli: str, args, log: Path) -> int:
        """Start ``cli`` as :meth:`run` does, without waiting: returns the child's pid (to
        signal it); :meth:`wait` then returns its exit status (negative: killed by that
        signal). One run at a time."""
        self._send(cli, args, log, report_pid=True)
        return self._reply()["pid"]

    def wait(self) -> int:
        """The exit status of the run :meth:`start` started, once it has ended."""
        return self._reply()["returncode"]

    def _send(self, cli, args, log, report_pid):
        request = {"cli": cli, "args": [str(a) for a in args], "log": str(log),
                   "report_pid": report_pid}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return request

    def _reply(self) -> dict:
        reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"the fork server died (exit status {self.proc.wait()})")
        return json.loads(reply)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is not None and self.proc.poll() is None:
            self.proc.kill()
        self.close()


def _run_child(request) -> int:
    """In the forked child: run the CLI's entry point with the request's argv and log file."""
    import importlib

    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.argv = [request["cli"], *request["args"]]
    # what importing fairseq_ext (--user-dir) does in a fresh process with this argv
    install_one_line_errors(fairseq_program())
    return exit_code(importlib.import_module(CLI_MODULES[request["cli"]]).cli_main)


def serve() -> None:
    """The server: replies on the stdout it was started with; anything else it prints (the
    imports log) goes to its stderr."""
    import importlib

    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for module in (*CLI_MODULES.values(), *LAZY_IMPORTS):
        importlib.import_module(module)
    import gc

    import fairseq_ext  # noqa: F401  (what --user-dir fairseq_ext imports)

    gc.freeze()  # the imported objects out of the collector's reach: children copy fewer pages

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            replies.close()
            os._exit(_run_child(request))
        if request.get("report_pid"):
            replies.write(json.dumps({"pid": pid}) + "\n")
            replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve()
