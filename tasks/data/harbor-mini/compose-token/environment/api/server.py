"""The `api` service: GET /token answers a token made at start; GET /health answers ok."""
import http.server
import secrets

TOKEN = secrets.token_hex(16)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/token": TOKEN, "/health": "ok"}.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write((body or "not found").encode())

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
