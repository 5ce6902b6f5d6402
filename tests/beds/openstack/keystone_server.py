"""Serve Keystone's WSGI app (keystone.server.wsgi) with Werkzeug's threaded server, on 127.0.0.1.

Run by bed.py with the bed venv's python: `python keystone_server.py PORT` with OS_KEYSTONE_CONFIG_FILES
set (the database, fernet keys and the admin were made with keystone-manage before).
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    port = int(sys.argv[1])
    del sys.argv[1:]  # keystone's configuration parses the command line
    from keystone.server import wsgi
    from werkzeug.serving import make_server

    app = wsgi.initialize_public_application()
    server = make_server("127.0.0.1", port, app, threaded=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"keystone serving on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
