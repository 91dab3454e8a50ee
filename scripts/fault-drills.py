#!/usr/bin/env python3
"""Fault drills against a live `kaas serve` (issue 38): what an unlucky operator and a
hostile client do to the service, and what must hold through it.

    python3 scripts/fault-drills.py [--kaas target/release/kaas] [--postgres URL] [--cycles 5]

Each drill starts real `kaas serve` processes on fresh databases (SQLite files in a temp
folder; with --postgres, also fresh databases on that server, dropped afterwards) with the
shipped catalog, and prints one line of results; a table of all drills comes last and the
exit status is non-zero when any drill's invariant failed.

  kill-import     SIGKILL at a random moment of the first start's catalog import, then
                  restart: the restarted service must come up ready with the whole catalog
                  (the same counts as a clean start), never a partial one.
  term-import     the same with SIGTERM.
  replicas        two replicas started in the same instant on one fresh database: both
                  must become ready (migrations and the import run once).
  acked-writes    artifact uploads from 4 clients while the service is killed (SIGKILL)
                  and restarted: every upload acknowledged with 200/201 must be there
                  after the restart; no 5xx other than 503.
  load            8 clients × 250 mixed catalog reads: no 5xx, latency percentiles.
  outage          (Postgres only) the database dropped under the running service: every
                  data route answers 503 with Retry-After, readiness 503, liveness 200.
  flood           300 idle connections from one client on the downloads listener, the
                  process limited to 256 descriptors: /v1/health on the API port keeps
                  answering.
  api-flood       (issue 52) on the API port of a process limited to 512 descriptors, from
                  one address, reopened as they close: 700 idle connections, 500 stalled
                  bodies (Content-Length 100000, 10 bytes sent; 25 from each of 20 tokens)
                  and 100 slowloris heads. Health, readiness and liveness on the health
                  listener, and liveness on the API port from another address, must each
                  answer within 1 s throughout; no "Too many open files".
  pg-outage       (Postgres only) the database behind a TCP proxy that is cut for 8 s under
                  8 clients' load, then restored (the machine's Postgres is never stopped):
                  every 503 answered in under 1.5 s, no other 5xx, ready again after.
  rate-replicas   two replicas on one database, a limit of 30 (burst 30, 1 a minute): of
                  100 requests alternating between them, 30 are allowed (and 60 with
                  --rate-limit-scope replica, for comparison).
  rate-cost       what the fleet-wide rate limit costs per request: one client's
                  sequential /v1/whoami latency with --rate-limit-scope fleet against
                  replica (2,000 requests each, p50 and mean).
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None, timeout: float = 10.0):
    """(status, headers, body); status 0 when the connection failed."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, {}, b""


class Server:
    """One `kaas serve` process."""

    def __init__(self, kaas: str, db_url: str, workdir: Path, downloads: bool = False, nofile: int | None = None,
                 health: bool = False, extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.downloads_port = free_port() if downloads else None
        self.health_port = free_port() if health else None
        args = [kaas, "serve", "--bind", f"127.0.0.1:{self.port}", "--database-url", db_url, "--catalog", str(ROOT / "kernels"), *extra]
        if downloads:
            args += ["--downloads-bind", f"127.0.0.1:{self.downloads_port}", "--downloads-dir", str(workdir / f"dl-{self.port}")]
        if health:
            args += ["--health-bind", f"127.0.0.1:{self.health_port}"]
        self.log = open(workdir / f"serve-{self.port}.log", "wb")

        def limit():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir, preexec_fn=limit)

    def ready(self, within: float = 120.0) -> bool:
        deadline = time.time() + within
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            if request(f"{self.base}/v1/health/ready", timeout=2)[0] == 200:
                return True
            time.sleep(0.1)
        return False

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.signal(signal.SIGTERM)
        self.log.close()


class Databases:
    """Fresh databases: SQLite files, or Postgres databases created and dropped."""

    def __init__(self, workdir: Path, postgres: str | None):
        self.workdir = workdir
        self.postgres = postgres
        self.made: list[str] = []

    def fresh(self, tag: str, backend: str) -> str:
        name = f"kaas_drill_{tag}_{os.getpid()}_{random.randrange(1 << 30)}"
        if backend == "sqlite":
            return f"sqlite://{self.workdir / (name + '.db')}?mode=rwc"
        self.psql(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        return self.url_of(name)

    def url_of(self, name: str) -> str:
        assert self.postgres
        return self.postgres.rsplit("/", 1)[0] + "/" + name

    def psql(self, sql: str) -> None:
        assert self.postgres
        subprocess.run(["psql", self.postgres, "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, capture_output=True)

    def drop(self, name: str) -> None:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def cleanup(self) -> None:
        for name in self.made:
            try:
                self.drop(name)
            except subprocess.CalledProcessError:
                pass


def problems_count(base: str) -> int | None:
    status, _, body = request(f"{base}/v1/problems", timeout=30)
    return len(json.loads(body)) if status == 200 else None


def drill_interrupted_import(kaas: str, dbs: Databases, backend: str, sig: int, cycles: int, reference: int) -> dict:
    failures, kills = [], []
    for i in range(cycles):
        url = dbs.fresh(f"imp{i}", backend)
        s = Server(kaas, url, dbs.workdir)
        at = random.uniform(0.2, 4.0)
        time.sleep(at)
        s.signal(sig)
        kills.append(round(at, 2))
        again = Server(kaas, url, dbs.workdir)
        if not again.ready():
            failures.append(f"cycle {i}: not ready after the restart")
        else:
            n = problems_count(again.base)
            if n != reference:
                failures.append(f"cycle {i}: {n} problems after the restart, a clean start has {reference}")
        again.stop()
    return {"ok": not failures, "detail": f"{cycles} cycles, signalled at {kills} s; " + ("; ".join(failures) or f"every restart ready with all {reference} problems")}


def drill_replicas(kaas: str, dbs: Databases, backend: str, reference: int) -> dict:
    url = dbs.fresh("rep", backend)
    a, b = Server(kaas, url, dbs.workdir), Server(kaas, url, dbs.workdir)
    ok_a, ok_b = a.ready(), b.ready()
    counts = (problems_count(a.base) if ok_a else None, problems_count(b.base) if ok_b else None)
    a.stop()
    b.stop()
    ok = ok_a and ok_b and counts == (reference, reference)
    return {"ok": ok, "detail": f"replica A ready={ok_a}, B ready={ok_b}, problems {counts} (clean start: {reference})"}


def token(kaas: str, url: str, workdir: Path) -> str:
    out = subprocess.run([kaas, "token", "create", "--name", f"drill{random.randrange(1 << 20)}", "--role", "submitter", "--database-url", url],
                         capture_output=True, text=True, cwd=workdir, check=True)
    return out.stdout.strip().splitlines()[-1]


def drill_acked_writes(kaas: str, dbs: Databases, backend: str) -> dict:
    url = dbs.fresh("acked", backend)
    s = Server(kaas, url, dbs.workdir)
    if not s.ready():
        return {"ok": False, "detail": "the service did not start"}
    secret = token(kaas, url, dbs.workdir)
    ptx = next((ROOT / "kernels" / "ptx").glob("*.ptx")).read_text()
    acked: list[str] = []
    bad: list[int] = []
    stop = threading.Event()
    lock = threading.Lock()
    server = {"base": s.base}

    def client(cid: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            text = f"{ptx}\n// drill client {cid} upload {n} {random.random()}\n"
            status, _, body = request(f"{server['base']}/v1/artifacts", "POST", text.encode(),
                                      {"Authorization": f"Bearer {secret}", "Content-Type": "text/plain"}, timeout=5)
            with lock:
                if status in (200, 201):
                    acked.append(json.loads(body)["sha256"])
                elif status >= 500 and status != 503:
                    bad.append(status)
            time.sleep(0.005)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    restarts = 3
    for _ in range(restarts):
        time.sleep(random.uniform(0.5, 1.5))
        s.signal(signal.SIGKILL)
        s = Server(kaas, url, dbs.workdir)
        server["base"] = s.base
        s.ready()
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    missing = [sha for sha in acked if request(f"{s.base}/v1/artifacts/{sha}")[0] != 200]
    s.stop()
    ok = not missing and not bad
    return {"ok": ok, "detail": f"{len(acked)} uploads acknowledged across {restarts} SIGKILL restarts; {len(missing)} missing after; 5xx other than 503: {len(bad)}"}


def drill_load(kaas: str, dbs: Databases, backend: str) -> dict:
    url = dbs.fresh("load", backend)
    s = Server(kaas, url, dbs.workdir)
    if not s.ready():
        return {"ok": False, "detail": "the service did not start"}
    problems = json.loads(request(f"{s.base}/v1/problems", timeout=30)[2])
    paths = [p["path"] for p in problems[:200]]
    routes = ["/v1/health", "/v1/stats", "/v1/heatmap?layout=tn", "/v1/problems?layout=nn", "/v1/workloads/llama-3.1-8b", "/v1/leaderboard"]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def client(cid: int) -> None:
        rng = random.Random(cid)
        for _ in range(250):
            path = rng.choice(routes) if rng.random() < 0.3 else f"/v1/kernels/{rng.choice(paths)}"
            t0 = time.perf_counter()
            status = request(f"{s.base}{path}", timeout=30)[0]
            dt = (time.perf_counter() - t0) * 1e3
            with lock:
                latencies.append(dt)
                statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    s.stop()
    latencies.sort()
    pct = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
    errors = sum(n for st, n in statuses.items() if st >= 500 or st == 0)
    return {"ok": errors == 0, "detail": f"{len(latencies)} requests in {wall:.1f} s ({len(latencies) / wall:.0f}/s); statuses {dict(sorted(statuses.items()))}; "
                                         f"latency p50 {pct(0.5):.1f} ms, p90 {pct(0.9):.1f} ms, p99 {pct(0.99):.1f} ms"}


def drill_outage(kaas: str, dbs: Databases) -> dict:
    name = f"kaas_drill_outage_{os.getpid()}"
    dbs.psql(f'CREATE DATABASE "{name}"')
    dbs.made.append(name)
    s = Server(kaas, dbs.url_of(name), dbs.workdir)
    if not s.ready():
        return {"ok": False, "detail": "the service did not start"}
    path = json.loads(request(f"{s.base}/v1/problems", timeout=30)[2])[0]["path"]
    dbs.drop(name)
    routes = ["/v1/problems", f"/v1/kernels/{path}", "/v1/stats", "/v1/heatmap", "/v1/leaderboard", "/v1/submissions", "/v1/workloads/llama-3.1-8b"]
    results = {}
    for r in routes:
        st, headers, _ = request(f"{s.base}{r}")
        results[r] = (st, "retry-after" in {k.lower() for k in headers})
    ready = request(f"{s.base}/v1/health/ready")[0]
    live = request(f"{s.base}/v1/health/live")[0]
    s.stop()
    # A route may still answer 200 from the catalog cache for a few seconds: that is not a
    # fault; a 500 is.
    bad = {r: v for r, v in results.items() if not (v[0] == 503 and v[1]) and v[0] != 200}
    ok = not bad and ready == 503 and live == 200
    return {"ok": ok, "detail": f"after DROP DATABASE: routes {results}; ready {ready}, live {live}" + (f"; wrong: {bad}" if bad else "")}


def drill_flood(kaas: str, dbs: Databases, backend: str) -> dict:
    url = dbs.fresh("flood", backend)
    s = Server(kaas, url, dbs.workdir, downloads=True, nofile=256)
    if not s.ready():
        return {"ok": False, "detail": "the service did not start with 256 descriptors"}
    socks, refused = [], 0
    for _ in range(300):
        try:
            c = socket.create_connection(("127.0.0.1", s.downloads_port), timeout=2)
            socks.append(c)
        except OSError:
            refused += 1
    answers, slowest = 0, 0.0
    for _ in range(20):
        t0 = time.perf_counter()
        if request(f"{s.base}/v1/health", timeout=5)[0] in (200, 503):
            answers += 1
        slowest = max(slowest, time.perf_counter() - t0)
        time.sleep(0.1)
    for c in socks:
        c.close()
    s.stop()
    return {"ok": answers == 20, "detail": f"{len(socks)} idle connections held open ({refused} refused at connect); /v1/health answered {answers} of 20, slowest {slowest * 1e3:.0f} ms"}


def raise_own_nofile() -> None:
    """The flood drills hold many client sockets: as many descriptors as this process may have."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def timed_get(host: str, port: int, path: str, source: str | None = None, timeout: float = 5.0) -> tuple[int, float]:
    """(status, seconds) of one GET on a fresh connection, from `source` when given; status 0 when none came."""
    t0 = time.perf_counter()
    try:
        s = socket.create_connection((host, port), timeout=timeout, source_address=(source, 0) if source else None)
        with s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            head = s.recv(64)
        status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
    except (OSError, ValueError, IndexError):
        status = 0
    return status, time.perf_counter() - t0


class Flood:
    """Connections of one kind held open on (host, port), each reopened once the server ends it;
    what ended them is counted (a status, `closed`, `reset`)."""

    def __init__(self, port: int, count: int, opening: callable):
        self.port, self.count, self.opening = port, count, opening
        self.ended: dict[str, int] = {}
        self.opened = 0
        self.socks: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open_one(self, i: int) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            s.setblocking(False)
            first = self.opening(i)
            if first:
                try:
                    s.send(first)
                except OSError:
                    pass
            self.socks.append(s)
            self.opened += 1
        except OSError:
            self.ended["connect failed"] = self.ended.get("connect failed", 0) + 1

    def run(self) -> None:
        import select
        i = 0
        while not self.stop.is_set():
            while len(self.socks) < self.count and not self.stop.is_set():
                self.open_one(i)
                i += 1
            # poll, not select: these descriptors run past select's 1024.
            poller = select.poll()
            by_fd = {s.fileno(): s for s in self.socks}
            for fd in by_fd:
                poller.register(fd, select.POLLIN)
            readable = [by_fd[fd] for fd, _ in poller.poll(200)]
            for s in readable:
                try:
                    data = s.recv(64)
                    what = data.split(b" ")[1].decode() if data.startswith(b"HTTP/1.1 ") else "closed"
                except ConnectionResetError:
                    what = "reset"
                except (BlockingIOError, IndexError):
                    continue
                self.ended[what] = self.ended.get(what, 0) + 1
                self.socks.remove(s)
                s.close()
        for s in self.socks:
            s.close()


def drill_api_flood(kaas: str, dbs: Databases, backend: str) -> dict:
    raise_own_nofile()
    url = dbs.fresh("apiflood", backend)
    s = Server(kaas, url, dbs.workdir, nofile=512, health=True)
    if not s.ready():
        return {"ok": False, "detail": "the service did not start with 512 descriptors"}
    secrets = [token(kaas, url, dbs.workdir) for _ in range(20)]
    stalled = lambda i: (f"POST /v1/artifacts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secrets[i % 20]}\r\n"
                         "Content-Type: text/plain\r\nContent-Length: 100000\r\n\r\n0123456789").encode()
    floods = {
        "idle": Flood(s.port, 700, lambda i: b""),
        "stalled bodies": Flood(s.port, 500, stalled),
        "slowloris heads": Flood(s.port, 100, lambda i: b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-a: "),
    }
    for f in floods.values():
        f.thread.start()
    time.sleep(2)
    probes = {"health :h /v1/health": [], "health :h /v1/health/ready": [], "health :h /v1/health/live": [], "api 127.0.0.2 /v1/health/live": []}
    t_end = time.time() + 20
    while time.time() < t_end:
        for name in probes:
            where, src, path = name.split(" ")
            port, source = (s.health_port, None) if where == "health" else (s.port, src)
            probes[name].append(timed_get("127.0.0.1", port, path, source=source))
        time.sleep(0.5)
    for f in floods.values():
        f.stop.set()
    for f in floods.values():
        f.thread.join()
    log = (dbs.workdir / f"serve-{s.port}.log").read_bytes()
    s.stop()
    out_of_fds = b"Too many open files" in log
    summary, ok = [], not out_of_fds
    for name, results in probes.items():
        answered = sum(1 for st, dt in results if st in (200, 503) and dt < 1.0)
        slowest = max(dt for _, dt in results)
        ok &= answered == len(results)
        summary.append(f"{name.split(' ', 1)[1]} {answered}/{len(results)} within 1 s (slowest {slowest * 1e3:.0f} ms)")
    ended = "; ".join(f"{k}: opened {f.opened}, ended {dict(sorted(f.ended.items()))}" for k, f in floods.items())
    return {"ok": ok, "detail": f"{'; '.join(summary)}; floods over 22 s — {ended}; out of descriptors: {out_of_fds}"}


class Proxy:
    """A TCP proxy to `upstream` that can be cut (its port closed and every connection
    through it dropped, as a stopped server looks) and restored."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.port = free_port()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(128)
        self.listener = ls
        threading.Thread(target=self.accept, args=(ls,), daemon=True).start()

    def accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    @staticmethod
    def pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        if self.listener:
            # shutdown first: a close alone leaves the socket listening while the accept
            # thread holds it (connections would hang in its backlog, not be refused).
            try:
                self.listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.listener.close()
            self.listener = None
        with self.lock:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self.conns.clear()


def drill_pg_outage(kaas: str, dbs: Databases) -> dict:
    from urllib.parse import urlsplit
    url = dbs.fresh("pgcut", "postgres")
    parts = urlsplit(url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    via = url.replace(parts.netloc, f"{parts.username + '@' if parts.username else ''}127.0.0.1:{proxy.port}", 1)
    # The first start's catalog import, directly: through this proxy it takes minutes.
    first = Server(kaas, url, dbs.workdir)
    first.ready()
    first.stop()
    s = Server(kaas, via, dbs.workdir, extra=("--catalog-cache-ttl-secs", "1"))
    if not s.ready():
        proxy.cut()
        return {"ok": False, "detail": "the service did not start behind the proxy"}
    paths = [p["path"] for p in json.loads(request(f"{s.base}/v1/problems", timeout=30)[2])[:100]]
    routes = ["/v1/stats", "/v1/leaderboard", "/v1/problems?layout=tn", "/v1/heatmap?layout=nn"]
    results: list[tuple[float, int, float, str]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(cid: int) -> None:
        rng = random.Random(cid)
        while not stop.is_set():
            path = rng.choice(routes) if rng.random() < 0.5 else f"/v1/kernels/{rng.choice(paths)}"
            t0 = time.perf_counter()
            status = request(f"{s.base}{path}", timeout=30)[0]
            with lock:
                results.append((time.time(), status, time.perf_counter() - t0, path))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(3)
    cut_at = time.time()
    proxy.cut()
    ready_during = []
    while time.time() < cut_at + 8:
        ready_during.append(timed_get("127.0.0.1", s.port, "/v1/health/ready"))
        time.sleep(0.5)
    proxy.restore()
    restored_at = time.time()
    back_after = None
    while time.time() < restored_at + 30:
        if timed_get("127.0.0.1", s.port, "/v1/health/ready")[0] == 200:
            back_after = time.time() - restored_at
            break
        time.sleep(0.2)
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join()
    s.stop()
    proxy.cut()
    # `at` is when the answer came: a request asked before the cut and answered after it
    # spent part of its time on a database that still answered; it is counted apart.
    during = [(st, dt) for at, st, dt, _ in results if cut_at <= at - dt and at <= restored_at]
    in_flight = [dt for at, st, dt, _ in results if at - dt < cut_at <= at and st == 503]
    unavailable = [dt for st, dt in during if st == 503]
    slow = sorted((dt, path) for at, st, dt, path in results if cut_at <= at - dt and at <= restored_at and st == 503 and dt >= 1.5)
    other_5xx = sum(1 for _, st, _, _ in results if st >= 500 and st != 503 or st == 0)
    slowest = max(unavailable, default=0.0)
    ready_slowest = max(dt for _, dt in ready_during)
    ok = bool(unavailable) and slowest < 1.5 and other_5xx == 0 and back_after is not None and all(st == 503 for st, _ in ready_during) and ready_slowest < 1.5
    return {"ok": ok, "detail": f"{len(results)} requests by 8 clients; asked during the 8 s cut {len(during)}, {len(unavailable)} of them answered 503 "
                                f"(slowest {slowest * 1e3:.0f} ms, p50 {sorted(unavailable)[len(unavailable) // 2] * 1e3 if unavailable else 0:.1f} ms); "
                                f"in flight at the cut: {len(in_flight)} answered 503, slowest {max(in_flight, default=0) * 1e3:.0f} ms; "
                                f"readiness 503 {sum(1 for st, _ in ready_during if st == 503)}/{len(ready_during)} (slowest {ready_slowest * 1e3:.0f} ms); "
                                f"other 5xx or no answer: {other_5xx}; ready {back_after and round(back_after, 1)} s after the restore"
                                + (f"; 503s over 1.5 s: {[(round(dt, 2), p) for dt, p in slow[-5:]]}" if slow else "")}


def drill_rate_replicas(kaas: str, dbs: Databases, backend: str) -> dict:
    allowed = {}
    for scope in ("fleet", "replica"):
        url = dbs.fresh(f"rate{scope}", backend)
        flags = ("--rate-limit-per-minute", "1", "--rate-limit-burst", "30", "--rate-limit-scope", scope)
        a, b = Server(kaas, url, dbs.workdir, extra=flags), Server(kaas, url, dbs.workdir, extra=flags)
        if not (a.ready() and b.ready()):
            a.stop(), b.stop()
            return {"ok": False, "detail": "the replicas did not start"}
        secret = token(kaas, url, dbs.workdir)
        ok = 0
        for i in range(100):
            base = a.base if i % 2 == 0 else b.base
            ok += request(f"{base}/v1/whoami", headers={"Authorization": f"Bearer {secret}"})[0] == 200
        allowed[scope] = ok
        a.stop(), b.stop()
    return {"ok": allowed["fleet"] == 30, "detail": f"of 100 requests alternating between two replicas, a limit of 30: {allowed['fleet']} allowed counted in the database, {allowed['replica']} counted per replica"}


def drill_rate_cost(kaas: str, dbs: Databases, backend: str) -> dict:
    url = dbs.fresh("ratecost", backend)
    numbers = {}
    for scope in ("replica", "fleet", "replica", "fleet"):
        s = Server(kaas, url, dbs.workdir, extra=("--rate-limit-per-minute", "10000000", "--rate-limit-burst", "10000000", "--rate-limit-scope", scope))
        if not s.ready():
            return {"ok": False, "detail": "the service did not start"}
        secret = token(kaas, url, dbs.workdir)
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        lat = []
        for i in range(2200):
            t0 = time.perf_counter()
            conn.request("GET", "/v1/whoami", headers={"Authorization": f"Bearer {secret}"})
            r = conn.getresponse()
            r.read()
            if i >= 200:
                lat.append(time.perf_counter() - t0)
        conn.close()
        s.stop()
        lat.sort()
        numbers.setdefault(scope, []).append((lat[len(lat) // 2], sum(lat) / len(lat)))
    best = {k: (min(p for p, _ in v), min(m for _, m in v)) for k, v in numbers.items()}
    dp, dm = (best["fleet"][0] - best["replica"][0]) * 1e6, (best["fleet"][1] - best["replica"][1]) * 1e6
    return {"ok": True, "detail": f"GET /v1/whoami, one client, keep-alive, 2,000 requests (best of 2 runs): p50 {best['replica'][0] * 1e6:.0f} µs per replica, "
                                  f"{best['fleet'][0] * 1e6:.0f} µs fleet-wide; mean {best['replica'][1] * 1e6:.0f} / {best['fleet'][1] * 1e6:.0f} µs: "
                                  f"the shared count costs {dp:.0f} µs (p50), {dm:.0f} µs (mean) per request"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kaas", default=str(ROOT / "target" / "release" / "kaas"))
    ap.add_argument("--postgres", help="a Postgres URL whose user may create databases, e.g. postgres://postgres@127.0.0.1:5432/test")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--only", help="comma-separated drill names")
    args = ap.parse_args()
    args.kaas = str(Path(args.kaas).resolve())
    if not Path(args.kaas).exists():
        print(f"no kaas binary at {args.kaas}: cargo build --release first", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="kaas-drills-"))
    dbs = Databases(workdir, args.postgres)
    backends = ["sqlite"] + (["postgres"] if args.postgres else [])
    only = set(args.only.split(",")) if args.only else None
    rows = []
    try:
        for backend in backends:
            ref = Server(args.kaas, dbs.fresh("ref", backend), workdir)
            if not ref.ready():
                print(f"{backend}: a clean start did not become ready; see {workdir}", file=sys.stderr)
                return 1
            reference = problems_count(ref.base) or 0
            ref.stop()
            drills = [
                ("kill-import", lambda: drill_interrupted_import(args.kaas, dbs, backend, signal.SIGKILL, args.cycles, reference)),
                ("term-import", lambda: drill_interrupted_import(args.kaas, dbs, backend, signal.SIGTERM, max(2, args.cycles // 2), reference)),
                ("replicas", lambda: drill_replicas(args.kaas, dbs, backend, reference)),
                ("acked-writes", lambda: drill_acked_writes(args.kaas, dbs, backend)),
                ("load", lambda: drill_load(args.kaas, dbs, backend)),
                ("flood", lambda: drill_flood(args.kaas, dbs, backend)),
                ("api-flood", lambda: drill_api_flood(args.kaas, dbs, backend)),
                ("rate-replicas", lambda: drill_rate_replicas(args.kaas, dbs, backend)),
                ("rate-cost", lambda: drill_rate_cost(args.kaas, dbs, backend)),
            ]
            if backend == "postgres":
                drills.append(("outage", lambda: drill_outage(args.kaas, dbs)))
                drills.append(("pg-outage", lambda: drill_pg_outage(args.kaas, dbs)))
            for name, run in drills:
                if only and name not in only:
                    continue
                t0 = time.time()
                r = run()
                r.update(name=name, backend=backend, seconds=round(time.time() - t0, 1))
                print(f"{name:<13} {backend:<9} {'ok ' if r['ok'] else 'FAIL'} {r['seconds']:>6.1f} s  {r['detail']}", flush=True)
                rows.append(r)
    finally:
        dbs.cleanup()
    print("\n| drill | backend | held | seconds | what was seen |\n|---|---|---|---:|---|")
    for r in rows:
        print(f"| {r['name']} | {r['backend']} | {'yes' if r['ok'] else '**no**'} | {r['seconds']} | {r['detail']} |")
    shutil.rmtree(workdir, ignore_errors=True) if all(r["ok"] for r in rows) else print(f"logs kept in {workdir}", file=sys.stderr)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
