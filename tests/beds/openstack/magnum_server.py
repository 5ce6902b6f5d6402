"""Magnum API + conductor in one process (the bed venv's python), over oslo.messaging's fake driver.

    python magnum_server.py MAGNUM_CONF

- the database: tables built from Magnum's models (its alembic migrations do not run on SQLite), as
  Magnum's own unit tests do;
- the conductor: Magnum's real RPC endpoints (magnum/cmd/conductor.py) and its periodic tasks
  (sync_cluster_status every ~10 s calls the driver's update_cluster_status);
- the API: Magnum's paste pipeline (keystonemiddleware auth_token against the bed's Keystone, pecan)
  served by Werkzeug's threaded server on [api] host/port.
`transport_url = fake:/` carries the API's RPC casts and calls to the conductor inside this process.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sqlite3
import sys
import threading


def main() -> None:
    conf_file = sys.argv[1]
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` prints every thread's stack
    import magnum
    from magnum.common import service as magnum_service

    magnum_service.prepare_service([sys.argv[0], "--config-file", conf_file])

    import magnum.conf
    from magnum.db.sqlalchemy import models
    from oslo_db.sqlalchemy import enginefacade
    from oslo_log import log as logging

    conf = magnum.conf.CONF
    log = logging.getLogger("magnum.bed")
    engine = enginefacade.writer.get_engine()
    models.Base.metadata.create_all(engine)
    # oslo.db emits BEGIN on SQLite for reads too, so a reader's open transaction held the conductor's commit
    # until SQLite's lock timeout ("database is locked", seen in CI). Magnum runs on MySQL/InnoDB, where
    # readers never block a writer; write-ahead logging gives this SQLite file the same behaviour.
    # (the mode stays with the file; set outside oslo.db, which wraps every statement in a transaction)
    with contextlib.closing(sqlite3.connect(engine.url.database)) as db:
        db.execute("PRAGMA journal_mode=WAL")

    from magnum.api import app as api_app
    from magnum.common import rpc_service, short_id
    from magnum.conductor.handlers import (
        ca_conductor,
        cluster_conductor,
        conductor_listener,
        credential_conductor,
        federation_conductor,
        indirection_api,
        nodegroup_conductor,
    )
    from magnum.drivers.common import driver as driver_module
    from werkzeug.serving import make_server

    drivers = [ep.name for ep, _ in driver_module.Driver.load_entry_points()]
    log.info("loaded drivers: %s", drivers)
    if not drivers:
        raise SystemExit("no Magnum driver found (the bed's dist-info is not on PYTHONPATH?)")

    endpoints = [indirection_api.Handler(), cluster_conductor.Handler(), conductor_listener.Handler(),
                 credential_conductor.Handler(), ca_conductor.Handler(), federation_conductor.Handler(),
                 nodegroup_conductor.Handler()]
    # The conductor's RPC server and periodic tasks run in this process, without oslo.service's launcher:
    # its threading backend (cotyledon) forks a worker, a second conductor whose fake:// exchange is a
    # copy no cast ever reaches and whose periodic sync would race this one's on the same database.
    server = rpc_service.Service.create(conf.conductor.topic, short_id.generate_id(), endpoints,
                                        binary="magnum-conductor")
    server.start()
    server.create_periodic_tasks()

    app = api_app.load_app()
    httpd = make_server(conf.api.host, conf.api.port, app, threaded=True)
    threading.Thread(target=httpd.serve_forever, name="magnum-api", daemon=True).start()
    log.info("magnum-api serving on http://%s:%s (pid %s)", conf.api.host, conf.api.port, os.getpid())
    print(f"magnum serving on http://{conf.api.host}:{conf.api.port}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    httpd.shutdown()
    server.stop()


if __name__ == "__main__":
    main()
