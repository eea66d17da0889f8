"""Drives `pagoda chat` through a pseudo-terminal, as a person at a terminal would.

`fake` mode points it (--url) at a fake OpenAI server started here, which records every request
and streams canned answers, so the history sent each turn is checked exactly: two turns, a
/system prompt, a /reset, and Ctrl-C in the middle of a slow answer (the chat stays, the server
sees the client go, the stopped turn is not in the history). `local` mode loads a real model in
the chat process and has one short exchange.

Usage: chat_pty.py PAGODA_BINARY fake
       chat_pty.py PAGODA_BINARY local MODEL.gguf
"""

import http.server
import json
import os
import pty
import select
import sys
import threading
import time


class FakeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests = []
        self.aborted = threading.Event()


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        assert self.path == "/v1/models", self.path
        body = json.dumps({"object": "list", "data": [{"id": "fake-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        assert self.path == "/v1/chat/completions", self.path
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(req)
        n = len(self.server.requests)
        question = req["messages"][-1]["content"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        if question == "slow":
            pieces, delay = ["tick "] * 400, 0.05
        else:
            pieces, delay = [f"echo {n}", ": ", question], 0.0
        try:
            for p in pieces:
                chunk = {"choices": [{"index": 0, "delta": {"content": p}}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(delay)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.server.aborted.set()


class Terminal:
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(argv[0], argv)
        self.out = ""
        self.seen = 0

    def expect(self, text, timeout=30.0):
        deadline = time.time() + timeout
        while True:
            at = self.out.find(text, self.seen)
            if at >= 0:
                self.seen = at + len(text)
                return self.out[:at]
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"no {text!r} in the terminal:\n{self.out}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError(f"chat ended waiting for {text!r}:\n{self.out}")
                self.out += data.decode("utf-8", "replace")

    def send(self, text):
        os.write(self.fd, text.encode())

    def wait_exit(self, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                if select.select([self.fd], [], [], 0.1)[0]:
                    self.out += os.read(self.fd, 4096).decode("utf-8", "replace")
            except OSError:
                pass
        raise AssertionError(f"chat did not exit:\n{self.out}")


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def fake(binary):
    server = FakeServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    t = Terminal([binary, "chat", "--url", url, "--temperature", "0"])
    t.expect("> ")
    t.send("/system Be terse.\n")
    t.expect("(system prompt set)")
    t.expect("> ")
    system = {"role": "system", "content": "Be terse."}

    t.send("first question\n")
    t.expect("echo 1: first question")
    t.expect("> ")
    t.send("second question\n")
    t.expect("echo 2: second question")
    t.expect("> ")
    assert server.requests[1]["messages"] == [
        system,
        user("first question"),
        assistant("echo 1: first question"),
        user("second question"),
    ], server.requests[1]
    assert all(r["model"] == "fake-model" and r["stream"] for r in server.requests)

    t.send("/reset\n")
    t.expect("(conversation reset)")
    t.expect("> ")
    t.send("third\n")
    t.expect("echo 3: third")
    t.expect("> ")
    assert server.requests[2]["messages"] == [system, user("third")], server.requests[2]

    t.send("slow\n")
    t.expect("tick tick ")
    t.send("\x03")  # Ctrl-C: the terminal sends SIGINT to the chat
    t.expect("(stopped)")
    t.expect("> ")
    assert server.aborted.wait(10), "the server never saw the stopped answer's client go"

    t.send("after stop\n")
    t.expect("echo 5: after stop")
    t.expect("> ")
    assert server.requests[4]["messages"] == [
        system,
        user("third"),
        assistant("echo 3: third"),
        user("after stop"),
    ], server.requests[4]

    t.send("/exit\n")
    code = t.wait_exit()
    assert code == 0, f"exit code {code}:\n{t.out}"


def local(binary, model):
    t = Terminal([binary, "chat", "--model", model, "--max-tokens", "8", "--temperature", "0"])
    t.expect("> ", timeout=180)
    t.send("Hello\n")
    t.expect("Hello")  # the terminal's echo
    answer = t.expect("> ", timeout=120)
    assert answer.strip(), f"no answer:\n{t.out}"
    assert "error" not in answer, answer
    t.send("\x04")  # Ctrl-D leaves too
    code = t.wait_exit()
    assert code == 0, f"exit code {code}:\n{t.out}"


if __name__ == "__main__":
    if sys.argv[2] == "fake":
        fake(sys.argv[1])
    else:
        local(sys.argv[1], sys.argv[3])
    print("ok")
