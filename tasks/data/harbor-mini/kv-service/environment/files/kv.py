import http.server, sys
port = int(open('/app/kv.conf').read().split('=')[1])
store = {}
class H(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        store[self.path.strip('/')] = self.rfile.read(int(self.headers['Content-Length'])).decode()
        self.send_response(204); self.end_headers()
    def do_GET(self):
        v = store.get(self.path.strip('/'))
        self.send_response(200 if v is not None else 404); self.end_headers()
        self.wfile.write((v or '').encode())
http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()
