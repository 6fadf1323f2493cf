#!/usr/bin/python3
"""agentbox's code-interpreter server: the HTTP protocol @e2b/code-interpreter
(2.8.0) speaks to port 49999 of a sandbox, on Jupyter kernels.

Routes (JSON; /execute answers newline-delimited JSON, streamed):
  GET    /health                  200 once the default context's kernel runs
  POST   /execute                 {code, context_id?, language?, env_vars?}
                                  -> lines {"type": "stdout"|"stderr", "text"},
                                  {"type": "result", "text", "png", ..., "is_main_result"},
                                  {"type": "error", "name", "value", "traceback"},
                                  {"type": "number_of_executions", "execution_count"},
                                  {"type": "end_of_execution"}
  POST   /contexts                {language?, cwd?} -> {id, language, cwd}
  GET    /contexts                -> [{id, language, cwd}]
  DELETE /contexts/{id}           204
  POST   /contexts/{id}/restart   204 (the kernel restarts: its state is gone)

One kernel per context, one execution per context at a time (state is kept
between calls in it); the default context serves calls that name neither a
context nor a language, and `language: python`. Only Python kernels
(Debian's python3-ipykernel); another language is a 400 naming it.
env_vars hold for one execution: set in the kernel's os.environ before the
code, restored after. A client that goes away mid-execution (the SDK's
timeoutMs aborts the request) interrupts the kernel, so the context is free
for the next call.

The create's env vars and the sandbox's access token reach this server
(started before the claim) through ~/.agentbox/claim.json, which the local
runtime writes before it reports the claim: env vars hold in every kernel;
/execute needs X-Access-Token (the SDK sends the envd access token with
runCode), other routes refuse a wrong one.

Standard library + Debian's python3-jupyter-client only; no pip. Threaded:
each request has its thread; kernels talk ZeroMQ through jupyter_client's
blocking client. Logs go to stderr, which the runtime keeps for start-command
errors.
"""

import argparse
import hashlib
import hmac
import json
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jupyter_client.manager import KernelManager

# What the local runtime writes (as user) before it reports a claim, since
# this server started before the claim: {"envVars": {...},
# "accessTokenSha256": "<hex of SHA-256 of the sandbox's envd access token>"}
CLAIM_FILE = os.path.expanduser("~/.agentbox/claim.json")
MAX_BODY = 16 * 1024 * 1024  # request bodies (code) are bounded
MAX_CONTEXTS = 64
KERNEL_START_TIMEOUT = 110  # below the env's startup timeout (120 s), so a stuck kernel fails the start command first
ENV_NAME_MAX = 256

# MIME type of a Jupyter display -> the Result field the SDK reads
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}


def log(msg, **kv):
    rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "msg": msg}
    rec.update(kv)
    print(json.dumps(rec), file=sys.stderr, flush=True)


def read_claim():
    """(signature, env vars, token digest or None) of the claim file."""
    try:
        st = os.stat(CLAIM_FILE)
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        with open(CLAIM_FILE, encoding="utf-8") as f:
            v = json.load(f)
        envs = v.get("envVars") if isinstance(v, dict) else None
        digest = v.get("accessTokenSha256") if isinstance(v, dict) else None
        if isinstance(envs, dict) and all(
            isinstance(k, str) and isinstance(x, str) for k, x in envs.items()
        ) and (digest is None or isinstance(digest, str)):
            return sig, envs, digest
        log("ignoring a malformed claim file", path=CLAIM_FILE)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        log("cannot read the claim file", path=CLAIM_FILE, error=str(e))
    return None, {}, None


def claim_envs():
    sig, envs, _ = read_claim()
    return sig, envs


def token_state(header):
    """'ok', 'missing' or 'wrong' for an X-Access-Token value. Before any
    claim (no file) nothing can reach this port: the data plane routes only
    to claimed sandboxes, so everything is 'ok'."""
    _, _, digest = read_claim()
    if not digest:
        return "ok"
    if not header:
        return "missing"
    got = hashlib.sha256(header.encode("utf-8")).hexdigest()
    return "ok" if hmac.compare_digest(got, digest) else "wrong"


class Context:
    """One kernel and the lock that makes its executions one at a time."""

    def __init__(self, cid, language, cwd):
        self.id = cid
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.km = None
        self.kc = None
        self.envs_sig = None  # the claim env vars file last applied

    def apply_claim_envs(self):
        """The create's env vars hold in the kernel like any process's (kept
        across executions); applied again only when the file changes."""
        sig, envs = claim_envs()
        if sig is None or sig == self.envs_sig:
            return
        if envs:
            self.quiet(f"import os as __ab_os\n__ab_os.environ.update({envs!r})\n")
        self.envs_sig = sig

    def start(self):
        # ipykernel's own "python3" spec: this interpreter (sys.executable)
        self.km = KernelManager(kernel_name="python3")
        env = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1")
        self.km.start_kernel(cwd=self.cwd, env=env)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=KERNEL_START_TIMEOUT)
        # plots as PNG displays: what the SDK's Result.png carries
        self.quiet("%matplotlib inline")

    def stop(self):
        try:
            if self.kc:
                self.kc.stop_channels()
            if self.km:
                self.km.shutdown_kernel(now=True)
        except Exception as e:  # a dead kernel is already stopped
            log("kernel shutdown failed", context=self.id, error=str(e))

    def restart(self):
        self.envs_sig = None  # a new kernel process: apply them again
        self.kc.stop_channels()
        self.km.restart_kernel(now=True)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=KERNEL_START_TIMEOUT)
        self.quiet("%matplotlib inline")

    def quiet(self, code):
        """Runs code without output or history; waits for its reply."""
        mid = self.kc.execute(code, silent=True, store_history=False)
        while True:
            msg = self.kc.get_shell_msg(timeout=KERNEL_START_TIMEOUT)
            if msg["parent_header"].get("msg_id") == mid:
                return msg["content"]

    def json(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class Server:
    def __init__(self, cwd):
        self.cwd = cwd
        self.contexts = {}
        self.lock = threading.Lock()
        self.ready = False
        self.default = None

    def start_default(self):
        ctx = Context(str(uuid.uuid4()), "python", self.cwd)
        try:
            ctx.start()
        except Exception as e:
            # fail the start command (and so the readiness wait) with the reason
            log("the default kernel did not start", error=repr(e))
            ctx.stop()
            os._exit(1)
        with self.lock:
            self.default = ctx
            self.contexts[ctx.id] = ctx
            self.ready = True
        log("default context ready", context=ctx.id)

    def find(self, cid):
        with self.lock:
            return self.contexts.get(cid)


def env_code(env_vars, restore_name):
    """Kernel code that sets env_vars and keeps the old values under restore_name."""
    return (
        "import os as __ab_os\n"
        f"{restore_name} = {{k: __ab_os.environ.get(k) for k in {list(env_vars)!r}}}\n"
        f"__ab_os.environ.update({env_vars!r})\n"
    )


def restore_code(restore_name):
    return (
        "import os as __ab_os\n"
        f"for __ab_k, __ab_v in {restore_name}.items():\n"
        "    if __ab_v is None: __ab_os.environ.pop(__ab_k, None)\n"
        "    else: __ab_os.environ[__ab_k] = __ab_v\n"
        f"del {restore_name}\n"
    )


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agentbox-code-interpreter"

    def log_message(self, fmt, *args):  # one JSON line per request instead
        pass

    # ---- helpers ---------------------------------------------------------

    def reply(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, message):
        self.reply(status, {"error": message, "message": message})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ValueError(f"the request body is larger than {MAX_BODY} bytes")
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        v = json.loads(raw)
        if not isinstance(v, dict):
            raise ValueError("the request body must be a JSON object")
        return v

    def chunk(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def client_gone(self):
        """True when the client closed its side (an aborted fetch)."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # ---- routes ------------------------------------------------------------

    def authorized(self, need):
        """The sandbox's envd access token, which the SDK sends with runCode:
        the data plane does not authenticate this port. A wrong token is
        refused everywhere; a missing one only where code runs (@e2b/code-
        interpreter 2.8.0 sends none with its context calls)."""
        state = token_state(self.headers.get("X-Access-Token", ""))
        if state == "ok" or (state == "missing" and not need):
            return True
        n = int(self.headers.get("Content-Length") or 0)
        if 0 < n <= MAX_BODY:
            self.rfile.read(n)  # keep the connection usable
        self.error(401, "Unauthorized: this call needs the sandbox's access token (X-Access-Token)")
        return False

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        srv = self.server.app
        if path != "/health" and not self.authorized(False):
            return
        if path == "/health":
            if srv.ready:
                self.reply(200, "OK")
            else:
                self.error(503, "the default kernel is still starting")
            return
        if path == "/contexts":
            with srv.lock:
                self.reply(200, [c.json() for c in srv.contexts.values()])
            return
        self.error(404, f"no route GET {path}")

    def do_DELETE(self):
        path = self.path.split("?", 1)[0]
        srv = self.server.app
        if not self.authorized(False):
            return
        parts = path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "contexts":
            with srv.lock:
                ctx = srv.contexts.get(parts[1])
                if ctx is None:
                    return self.error(404, f"context '{parts[1]}' not found")
                if ctx is srv.default:
                    return self.error(400, "the default context cannot be removed")
                del srv.contexts[parts[1]]
            ctx.stop()
            return self.reply(204)
        self.error(404, f"no route DELETE {path}")

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        srv = self.server.app
        if not self.authorized(path == "/execute"):
            return
        try:
            req = self.body()
        except (ValueError, json.JSONDecodeError) as e:
            return self.error(400, f"bad request body: {e}")
        if path == "/execute":
            return self.execute(srv, req)
        if path == "/contexts":
            return self.create_context(srv, req)
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
            ctx = srv.find(parts[1])
            if ctx is None:
                return self.error(404, f"context '{parts[1]}' not found")
            with ctx.lock:
                try:
                    ctx.restart()
                except Exception as e:
                    return self.error(500, f"the kernel did not restart: {e}")
            return self.reply(204)
        self.error(404, f"no route POST {path}")

    def create_context(self, srv, req):
        language = req.get("language") or "python"
        cwd = req.get("cwd") or srv.cwd
        if language != "python":
            return self.error(400, f"field 'language': no kernel for '{language}' (python only)")
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            return self.error(400, "field 'cwd' must be an absolute path")
        if not os.path.isdir(cwd):
            return self.error(400, f"field 'cwd': directory '{cwd}' does not exist")
        with srv.lock:
            if len(srv.contexts) >= MAX_CONTEXTS:
                return self.error(429, f"{MAX_CONTEXTS} contexts exist already: remove one")
        ctx = Context(str(uuid.uuid4()), language, cwd)
        try:
            ctx.start()
        except Exception as e:
            ctx.stop()
            return self.error(500, f"the kernel did not start: {e}")
        with srv.lock:
            srv.contexts[ctx.id] = ctx
        log("context created", context=ctx.id, cwd=cwd)
        self.reply(200, ctx.json())

    def execute(self, srv, req):
        code = req.get("code")
        cid = req.get("context_id")
        language = req.get("language")
        env_vars = req.get("env_vars") or {}
        if not isinstance(code, str):
            return self.error(400, "field 'code' must be a string")
        if cid and language:
            return self.error(400, "give 'context_id' or 'language', not both")
        if not isinstance(env_vars, dict) or any(
            not isinstance(k, str) or not isinstance(v, str) or not k or "=" in k
            or len(k) > ENV_NAME_MAX
            for k, v in env_vars.items()
        ):
            return self.error(400, "field 'env_vars' must map names (no '=') to strings")
        if cid:
            ctx = srv.find(cid)
            if ctx is None:
                return self.error(404, f"context '{cid}' not found")
        elif language and language != "python":
            return self.error(400, f"field 'language': no kernel for '{language}' (python only)")
        else:
            ctx = srv.default
        if ctx is None:
            return self.error(503, "the default kernel is still starting")
        with ctx.lock:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                try:
                    self.run(ctx, code, env_vars)
                except (BrokenPipeError, ConnectionResetError):
                    raise
                except Exception as e:  # the kernel's channels failed: say so in-stream
                    log("execution failed", context=ctx.id, error=repr(e))
                    self.chunk({"type": "error", "name": type(e).__name__, "value": str(e),
                                "traceback": ""})
                    self.chunk({"type": "end_of_execution"})
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            finally:
                if env_vars:
                    try:
                        ctx.quiet(restore_code("__ab_env_saved"))
                    except Exception as e:
                        log("env restore failed", context=ctx.id, error=str(e))

    def run(self, ctx, code, env_vars):
        kc = ctx.kc
        ctx.apply_claim_envs()
        if env_vars:
            ctx.quiet(env_code(env_vars, "__ab_env_saved"))
        mid = kc.execute(code, store_history=True, allow_stdin=False)
        count = None
        gone = False
        while True:
            try:
                msg = kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if not gone and self.client_gone():
                    # the SDK gave up (timeoutMs): free the context for the next call
                    gone = True
                    log("client went away: interrupting", context=ctx.id)
                    ctx.km.interrupt_kernel()
                if not ctx.km.is_alive():
                    self.chunk({"type": "error", "name": "KernelDied",
                                "value": "the kernel died during the execution",
                                "traceback": ""})
                    break
                continue
            if msg["parent_header"].get("msg_id") != mid:
                continue
            t = msg["msg_type"]
            c = msg["content"]
            if gone:
                if t == "status" and c.get("execution_state") == "idle":
                    break
                continue
            if t == "stream":
                self.chunk({"type": c["name"], "text": c["text"], "timestamp": int(time.time() * 1e6)})
            elif t in ("execute_result", "display_data"):
                self.chunk(self.result(c.get("data", {}), t == "execute_result"))
            elif t == "error":
                self.chunk({"type": "error", "name": c.get("ename", ""),
                            "value": c.get("evalue", ""),
                            "traceback": "\n".join(c.get("traceback", []))})
            elif t == "execute_input":
                count = c.get("execution_count")
            elif t == "status" and c.get("execution_state") == "idle":
                break
        if gone:
            raise BrokenPipeError()
        if count is not None:
            self.chunk({"type": "number_of_executions", "execution_count": count})
        self.chunk({"type": "end_of_execution"})

    @staticmethod
    def result(data, main):
        out = {"type": "result", "is_main_result": main}
        extra = {}
        for mime, v in data.items():
            field = MIME_FIELDS.get(mime)
            if field:
                out[field] = v if isinstance(v, str) or field == "json" else json.dumps(v)
            else:
                extra[mime] = v
        if extra:
            out["extra"] = extra
        return out


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        e = sys.exc_info()[1]
        if isinstance(e, (ConnectionResetError, BrokenPipeError)):
            return  # a client that hung up: nothing to report
        log("request failed", client=str(client_address), error=repr(e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=49999)
    ap.add_argument("--cwd", default=os.path.expanduser("~"))
    a = ap.parse_args()
    app = Server(a.cwd)
    httpd = HTTPServer((a.host, a.port), Handler)
    httpd.app = app
    # the port listens at once (a tcpSocket check passes); /health waits for the kernel
    threading.Thread(target=app.start_default, daemon=True).start()
    log("listening", host=a.host, port=a.port)
    # SIGTERM shuts the kernels down too (they are our children, not the sandbox's)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        httpd.serve_forever()
    finally:
        for ctx in list(app.contexts.values()):
            ctx.stop()


if __name__ == "__main__":
    main()
