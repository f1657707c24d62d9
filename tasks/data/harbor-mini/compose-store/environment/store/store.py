"""The `store` service: an in-memory key-value store over HTTP (PUT/GET /kv/<key>)."""
import http.server
import os
import urllib.parse

DATA = {}


class Handler(http.server.BaseHTTPRequestHandler):
    def _key(self):
        path = urllib.parse.unquote(self.path)
        return path[len("/kv/"):] if path.startswith("/kv/") else None

    def do_PUT(self):
        key = self._key()
        length = int(self.headers.get("Content-Length") or 0)
        if key:
            DATA[key] = self.rfile.read(length)
        self.send_response(204 if key else 404)
        self.end_headers()

    def do_GET(self):
        key = self._key()
        body = b"ok" if self.path == "/health" else DATA.get(key) if key else None
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body if body is not None else b"not found")

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["STORE_PORT"])), Handler).serve_forever()
