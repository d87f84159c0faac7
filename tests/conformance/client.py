"""The conformance suite's client, played by mcpmux: see client.sh. Exits 0 once `test-tool`
answered through mcpmux, 1 otherwise; stops the daemon either way."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
MAX_SIGN_INS = 3


def log(*parts):
    print("client.py:", *parts, file=sys.stderr, flush=True)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def http(method, url, body=None, headers=None, follow=True):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("content-type", "application/json")
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=20) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def config(url, context, state):
    lines = [
        "[server]", 'listen = "127.0.0.1:0"', "",
        "[upstreams.server]", f"url = {json.dumps(url)}", 'prefix = ""',
        'request_timeout = "10s"', "",
        "[upstreams.server.oauth]",
        'client_id_metadata_url = "https://conformance-test.local/client-metadata.json"',
    ]
    env = {}
    if "client_id" in context:
        lines.append(f"client_id = {json.dumps(context['client_id'])}")
    if "client_secret" in context:
        lines.append('client_secret_env = "MCPMUX_CONFORMANCE_CLIENT_SECRET"')
        env["MCPMUX_CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
    if context.get("name", "").startswith("auth/client-credentials"):
        lines.append('grant = "client_credentials"')
    path = state / "mcpmux.toml"
    path.write_text("\n".join(lines) + "\n")
    return path, env


class Daemon:
    def __init__(self, config_path, env, state):
        binary = os.environ.get("MCPMUX_BIN") or str(REPO / "target" / "release" / "mcpmux")
        self.process = subprocess.Popen(
            [binary, "serve", "--config", str(config_path), "--admin", "127.0.0.1:0",
             "--state-dir", str(state / "state")],
            stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env={**os.environ, **env})
        self.url = self.admin = None
        for line in self.process.stdout:
            line = line.strip()
            if line.startswith("mcpmux: listening on "):
                self.url = line.removeprefix("mcpmux: listening on ")
            elif line.startswith("mcpmux: admin on "):
                self.admin = line.removeprefix("mcpmux: admin on ")
            if self.url and self.admin:
                break

    def status(self):
        _, _, body = http("GET", f"{self.admin}/status")
        return next(u for u in json.loads(body)["upstreams"] if u["name"] == "server")

    def settled(self):
        for _ in range(200):
            state = self.status()["state"]
            if state not in ("starting", "restarting"):
                return state
            time.sleep(0.05)
        return self.status()["state"]

    def sign_in(self):
        status, _, body = http("POST", f"{self.admin}/upstreams/server/login")
        answer = json.loads(body)
        if status != 200:
            log("sign-in refused:", answer.get("error"))
            return False
        if answer.get("authorization_url"):
            # What a person's browser does: open the URL, follow it back to mcpmux's listener.
            status, headers, _ = http("GET", answer["authorization_url"], follow=False)
            location = headers.get("Location") or headers.get("location")
            if not location:
                log("the authorization endpoint answered", status, "without a redirect")
                return False
            http("GET", location)
        for _ in range(200):
            _, _, body = http("GET", f"{self.admin}/upstreams/server/login")
            state = json.loads(body)
            if state["state"] == "done":
                return True
            if state["state"] == "failed":
                log("sign-in failed:", state.get("error"))
                return False
            time.sleep(0.05)
        return False

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Host:
    def __init__(self, url):
        self.url, self.session, self.next_id = url, None, 1
        answer = self.request("initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "conformance-host", "version": "1"}})
        assert "result" in answer, answer
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message):
        headers = {"accept": "application/json, text/event-stream",
                   "mcp-protocol-version": "2025-11-25"}
        if self.session:
            headers["mcp-session-id"] = self.session
        status, response_headers, body = http("POST", self.url, message, headers)
        self.session = self.session or response_headers.get("mcp-session-id") or response_headers.get("Mcp-Session-Id")
        return json.loads(body) if body else None

    def request(self, method, params):
        self.next_id += 1
        return self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})


def main():
    url = sys.argv[1]
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory() as tmp:
        state = pathlib.Path(tmp)
        path, env = config(url, context, state)
        daemon = Daemon(path, env, state)
        try:
            return run(daemon)
        finally:
            daemon.stop()


def run(daemon):
    sign_ins = 0
    host = None
    calls = [("tools/list", {}), ("tools/call", {"name": "test-tool", "arguments": {}})]
    for method, params in calls:
        for _attempt in range(2):
            state = daemon.settled()
            if state in ("needs-login", "unauthorized"):
                if sign_ins == MAX_SIGN_INS:
                    log("giving up after", sign_ins, "sign-ins")
                    return 1
                sign_ins += 1
                if not daemon.sign_in():
                    return 1
                state = daemon.settled()
            host = host or Host(daemon.url)
            answer = host.request(method, params)
            if "result" in answer:
                log(method, "answered")
                break
            log(method, "failed:", answer.get("error"))
        else:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
