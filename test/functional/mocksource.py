"""A mock context source for the distributed tests: an HTTP server on a free
loopback port answering every request with a fixed status and body, or
after a delay (a source that does not answer in time); it records each
request as (method, path, headers, body)."""

import http.server
import threading
import time


class MockSource:
    def __init__(self, status=200, body=b"[]", delay=0.0):
        self.requests = []
        mock = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n) if n else b""
                mock.requests.append((self.command, self.path, dict(self.headers), data))
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.base = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
