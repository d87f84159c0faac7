"""The conformance suite's client, played by mcpmux: see client.sh. Exits 0 once `test-tool`
answered through mcpmux, 1 otherwise; stops the daemon either way."""

import base64
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
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


def issuer_of(url):
    """The authorization server the server at `url` names, as the operator who configures a
    client secret finds it out once, by hand: its challenge's resource metadata, else the
    well-known one, else (a 2025-03-26 server) its origin. mcpmux then trusts this one only."""
    origin = "/".join(url.split("/")[:3])
    _, headers, _ = http("POST", url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
                         {"accept": "application/json, text/event-stream"})
    challenge = headers.get("WWW-Authenticate") or headers.get("www-authenticate") or ""
    candidates = []
    if 'resource_metadata="' in challenge:
        candidates.append(challenge.split('resource_metadata="', 1)[1].split('"', 1)[0])
    path = urllib.parse.urlparse(url).path.rstrip("/")
    candidates += [f"{origin}/.well-known/oauth-protected-resource{path}",
                   f"{origin}/.well-known/oauth-protected-resource"]
    for candidate in candidates:
        status, _, body = http("GET", candidate)
        if status == 200:
            servers = json.loads(body).get("authorization_servers") or []
            if servers:
                return servers[0]
    return origin


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
    def private(name, text):
        # A secret in a file only its owner reads, where its platform would keep it.
        path = state / name
        path.write_text(text)
        path.chmod(0o600)
        return json.dumps(str(path))
    if "private_key_pem" in context:
        lines.append(f"private_key_file = {private('client-key.pem', context['private_key_pem'])}")
        lines.append(f"signing_algorithm = {json.dumps(context.get('signing_algorithm', 'ES256'))}")
    if context.get("name", "").startswith("auth/client-credentials"):
        lines.append('grant = "client_credentials"')
    if "valid_jwt" in context:
        # Workload identity federation: the workload's JWT is the grant.
        lines.append('grant = "jwt_bearer"')
        lines.append(f"assertion_file = {private('workload.jwt', context['valid_jwt'])}")
    if "idp_id_token" in context:
        # Enterprise-managed authorization: the identity provider's ID token, exchanged there for
        # an ID-JAG.
        lines.append('grant = "identity_assertion"')
        lines.append(f"assertion_file = {private('id.token', context['idp_id_token'])}")
        lines.append(f"idp_token_endpoint = {json.dumps(context['idp_token_endpoint'])}")
        if "idp_client_id" in context:
            lines.append(f"idp_client_id = {json.dumps(context['idp_client_id'])}")
    if "client_secret" in context or "private_key_pem" in context or "valid_jwt" in context:
        # A configured credential goes to the configured issuer only.
        lines.append(f"issuer = {json.dumps(issuer_of(url))}")
    path = state / "mcpmux.toml"
    path.write_text("\n".join(lines) + "\n")
    return path, env


class Daemon:
    def __init__(self, config_path, env, state):
        binary = os.environ.get("MCPMUX_BIN") or str(REPO / "target" / "release" / "mcpmux")
        self.binary = binary
        self.log = state / "daemon.log"
        self.process = subprocess.Popen(
            [binary, "serve", "--config", str(config_path), "--admin", "127.0.0.1:0",
             "--state-dir", str(state / "state")],
            stdout=subprocess.PIPE, stderr=open(self.log, "w"), text=True,
            env={**os.environ, **env, "MCPMUX_LOG": "debug"})
        self.state = state
        self.url = self.admin = None
        for line in self.process.stdout:
            line = line.strip()
            if line.startswith("mcpmux: listening on "):
                self.url = line.removeprefix("mcpmux: listening on ")
            elif line.startswith("mcpmux: admin on "):
                self.admin = line.removeprefix("mcpmux: admin on ")
            if self.url and self.admin:
                break

    def admin_headers(self):
        # The admin API wants the token the daemon made in its state directory.
        token = (self.state / "state" / "admin.token").read_text().strip()
        return {"authorization": f"Bearer {token}"}

    def status(self):
        _, _, body = http("GET", f"{self.admin}/status", headers=self.admin_headers())
        return next(u for u in json.loads(body)["upstreams"] if u["name"] == "server")

    def settled(self):
        for _ in range(200):
            state = self.status()["state"]
            if state not in ("starting", "restarting"):
                return state
            time.sleep(0.05)
        return self.status()["state"]

    def sign_in(self):
        # `mcpmux login` as a person runs it: it prints the URL to open and waits.
        login = subprocess.Popen(
            [self.binary, "login", "server", "--admin", self.admin, "--no-browser"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in login.stdout:
            url = line.strip()
            if url.startswith("http://") or url.startswith("https://"):
                # What the person's browser does: open it, follow it back to mcpmux's listener.
                status, headers, _ = http("GET", url, follow=False)
                location = headers.get("Location") or headers.get("location")
                if not location:
                    log("the authorization endpoint answered", status, "without a redirect")
                    login.kill()
                    return False
                http("GET", location)
                break
        try:
            code = login.wait(timeout=20)
        except subprocess.TimeoutExpired:
            login.kill()
            return False
        if code != 0:
            log("mcpmux login failed:", login.stderr.read().strip())
        return code == 0

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Host:
    """A handshake-era host of mcpmux that declares sampling, elicitation and roots and answers
    what it is asked on a call's event stream (accept, a canned model reply, no roots): the
    scenarios' servers ask through mcpmux, which speaks 2026-07-28 to them."""

    def __init__(self, url):
        self.url, self.session, self.next_id = url, None, 1
        answer = self.request("initialize", {
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}, "elicitation": {"form": {}}, "roots": {}},
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

    def headers(self):
        headers = {"accept": "application/json, text/event-stream",
                   "mcp-protocol-version": "2025-11-25", "content-type": "application/json"}
        if self.session:
            headers["mcp-session-id"] = self.session
        return headers

    def request(self, method, params):
        """Sends a request and reads its answer, answering what mcpmux asks on the way."""
        if not self.session:
            self.next_id += 1
            return self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.next_id += 1
        ours = self.next_id
        body = json.dumps({"jsonrpc": "2.0", "id": ours, "method": method, "params": params}).encode()
        request = urllib.request.Request(self.url, data=body, method="POST", headers=self.headers())
        try:
            response = urllib.request.urlopen(request, timeout=60)
        except urllib.error.HTTPError as e:
            return json.loads(e.read().decode() or "{}")
        with response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                return json.loads(response.read().decode())
            for raw in response:
                line = raw.decode().rstrip("\r\n")
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:].strip())
                if message.get("id") == ours and "method" not in message:
                    return message
                if "method" in message and "id" in message:
                    self.answer(message)
        return {"error": {"code": -1, "message": "the answer's stream ended without the answer"}}

    def answer(self, asked):
        """What a person and a model would answer: accept (with the schema's booleans true),
        a short reply, no roots."""
        method = asked["method"]
        if method == "elicitation/create":
            schema = asked.get("params", {}).get("requestedSchema", {})
            content = {k: True for k, v in schema.get("properties", {}).items() if v.get("type") == "boolean"}
            result = {"action": "accept", "content": content}
        elif method == "sampling/createMessage":
            result = {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "conformance"}
        elif method == "roots/list":
            result = {"roots": []}
        else:
            result = {}
        self.post({"jsonrpc": "2.0", "id": asked["id"], "result": result})


class ModernHost(Host):
    """A 2026-07-28 host of mcpmux: each request stateless, with its envelope and headers; what
    a call's `input_required` result asks is answered as `Host` answers it, and the call sent
    again with the answers and the `requestState` (the suite's 2026-07-28 run judges mcpmux as
    a 2026-07-28 client, which it is for such a host: for a handshake-era host it speaks the
    handshake era to a server that serves both, as that host would direct)."""

    VERSION = "2026-07-28"
    CAPABILITIES = {"sampling": {}, "elicitation": {"form": {}}, "roots": {}}

    def __init__(self, url):
        self.url, self.next_id, self.tools = url, 1, {}

    def request(self, method, params):
        answer = self.exchange(method, params)
        if method == "tools/list":
            for tool in (answer.get("result") or {}).get("tools", []):
                self.tools[tool["name"]] = tool
        return answer

    def param_headers(self, name, arguments):
        """The `Mcp-Param-*` headers of a call of tool `name`: each parameter its listing marks
        with `x-mcp-header` that has a value, as mcpmux's own upstream requests carry them."""
        headers = {}

        def walk(schema, value):
            for key, property in (schema.get("properties") or {}).items():
                if not isinstance(value, dict) or key not in value:
                    continue
                if "x-mcp-header" in property and value[key] is not None:
                    found = value[key]
                    text = ("true" if found else "false") if isinstance(found, bool) else str(found)
                    plain = text and text.isascii() and text.isprintable() and text.strip() == text
                    if not plain:
                        text = "=?base64?" + base64.b64encode(text.encode()).decode() + "?="
                    headers["mcp-param-" + property["x-mcp-header"]] = text
                walk(property, value[key])

        walk((self.tools.get(name) or {}).get("inputSchema") or {}, arguments)
        return headers

    def exchange(self, method, params):
        params = dict(params)
        for _round in range(8):
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": self.VERSION,
                "io.modelcontextprotocol/clientCapabilities": self.CAPABILITIES,
                "io.modelcontextprotocol/clientInfo": {"name": "conformance-host", "version": "1"}}
            headers = {"accept": "application/json, text/event-stream",
                       "mcp-protocol-version": self.VERSION, "mcp-method": method}
            if "name" in params:
                headers["mcp-name"] = params["name"]
            if method == "tools/call":
                headers.update(self.param_headers(params["name"], params.get("arguments") or {}))
            self.next_id += 1
            message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
            _, response_headers, body = http("POST", self.url, message, headers)
            answer = self.last(response_headers, body)
            result = answer.get("result") or {}
            if result.get("resultType") != "input_required":
                return answer
            asked = result.get("inputRequests") or {}
            params["inputResponses"] = {key: self.answered(request) for key, request in asked.items()}
            if "requestState" in result:
                params["requestState"] = result["requestState"]
            else:
                params.pop("requestState", None)
        return {"error": {"code": -1, "message": "still asked for input after 8 rounds"}}

    @staticmethod
    def last(headers, body):
        """The answer in a JSON or event-stream body."""
        kind = headers.get("content-type") or headers.get("Content-Type") or ""
        if not kind.startswith("text/event-stream"):
            return json.loads(body) if body else {}
        messages = [json.loads(line[5:].strip()) for line in body.splitlines() if line.startswith("data:")]
        answers = [m for m in messages if "method" not in m]
        return answers[-1] if answers else {}

    def answered(self, asked):
        """What `Host.answer` would send back for `asked`."""
        sent = []
        self.post = sent.append
        self.answer({**asked, "id": 0})
        return sent[0]["result"]


def arguments_for(tool):
    """Arguments that satisfy a tool's required parameters (a number, a string, a boolean)."""
    schema = tool.get("inputSchema") or {}
    samples = {"number": 2, "integer": 3, "string": "conformance", "boolean": True}
    properties = schema.get("properties") or {}
    return {name: samples.get(properties.get(name, {}).get("type"), "conformance")
            for name in schema.get("required") or []}


def calls_after(tools, context):
    """What to call once the tools are listed: the scenario's own calls when its context names
    them, else each tool listed (so a scenario's server sees the calls it is written for)."""
    if context.get("toolCalls"):
        return [("tools/call", {"name": c["name"], "arguments": c.get("arguments", {})})
                for c in context["toolCalls"]]
    if not tools:
        # Nothing listed yet (the upstream wants a sign-in first): the sign-in scenarios' tool,
        # whose refusal says what to do.
        return [("tools/call", {"name": "test-tool", "arguments": {}})]
    return [("tools/call", {"name": t["name"], "arguments": arguments_for(t)}) for t in tools]


def main():
    url = sys.argv[1]
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory() as tmp:
        state = pathlib.Path(tmp)
        path, env = config(url, context, state)
        daemon = Daemon(path, env, state)
        try:
            code = run(daemon, context)
            leaks = leaked(daemon, context)
            if leaks:
                log("a token or secret leaked into", ", ".join(leaks))
                code = 1
            return code
        finally:
            daemon.stop()
            sys.stderr.write(daemon.log.read_text())


def leaked(daemon, context):
    """Where a token or the client secret appears: the daemon's log, its status, its audit log."""
    secrets = ["test-token", "cc-token"] + [context[k] for k in ("client_secret", "valid_jwt", "idp_id_token") if k in context]
    places = {
        "the daemon's log": daemon.log.read_text(),
        "the status": http("GET", f"{daemon.admin}/status", headers=daemon.admin_headers())[2],
        "the audit log": http("GET", f"{daemon.admin}/audit/query?limit=1000")[2],
    }
    return [place for place, text in places.items() if any(s in text for s in secrets)]


def run(daemon, context):
    sign_ins = 0
    host = None
    calls = [("tools/list", {})]
    while calls:
        method, params = calls.pop(0)
        wants_sign_in = False
        for _attempt in range(4):
            state = daemon.settled()
            # A refused call may answer before the upstream's state says so: its error tells.
            if wants_sign_in or state in ("needs-login", "unauthorized"):
                wants_sign_in = False
                if sign_ins == MAX_SIGN_INS:
                    log("giving up after", sign_ins, "sign-ins")
                    return 1
                sign_ins += 1
                # mcpmux may be renewing the sign-in itself just then: try again, within limits.
                if not daemon.sign_in():
                    continue
                state = daemon.settled()
            modern = os.environ.get("MCPMUX_CONFORMANCE_HOST") == ModernHost.VERSION
            host = host or (ModernHost if modern else Host)(daemon.url)
            answer = host.request(method, params)
            if "result" in answer:
                log(method, "answered")
                if method == "tools/list":
                    calls += calls_after(answer["result"].get("tools", []), context)
                break
            log(method, "failed:", answer.get("error"))
            message = (answer.get("error") or {}).get("message", "")
            wants_sign_in = "needs-login" in message or "needs a sign-in" in message
            if not wants_sign_in and method == "tools/call" and daemon.settled() == "ready":
                # The tool's own error: the scenario's checks judge it.
                break
        else:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
