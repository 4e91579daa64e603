#!/usr/bin/env python3
"""Integration test of the module's controls: real nginx, real upstreams, real clients.

Each directive is checked against nginx on 127.0.0.1 under a temporary prefix, with the Python
standard library only (the HTTP client and checks come from test_nginx.py):

- fairq_tenant with three values (user, team, api_key): the first non-empty one names the
  tenant, $fairq_tenant_dimension and the 429 body carry its dimension, /metrics counts it
  under its key;
- fairq_tier and fairq_tenant_tier (a map of the API key): two tenants' measured split moves
  from 1:1 to 3:1 (within 10 %);
- fairq_starvation_guard: a weight-1 tenant against a weight-99 one gets its 3 % floor (under
  2 % without the guard);
- fairq_wait_boost: the boost adds 1 to a waiting tenant's weight class, so 48 weight-1 tenants
  that each wait some 5 s for their turn against one of weight 800 get at least 1.3x the share
  they get from the same traffic, at the same time, on an nginx without it;
- fairq_feedback: the controller moves effective weights. A weight-2 tenant that the guard gave
  a third of the grants in the first period (its weight gives it a fifth) weighs 1 after it
  (60 s, the shortest period): 1:2 against another weight-2 tenant, where a weight-2 tenant
  idle in the period still splits 1:1. And the period runs on the timer of each of 2 workers;
- fairq_pool and fairq_downstream: a stuck pool leaves the other pool's p95 within 1.5x of its
  p95 alone (and without pools, the same stuck upstream takes every permit);
- fairq_shed: with the upstream answering 500 to 10 % of a pool's requests, the pool's limit is
  cut, requests it cannot serve in budget get 429 downstream_shedding at once, /metrics shows
  the stage, and calm traffic grows the limit back;
- nginx -t names a bad value of each directive.

Run: ffi/nginx/test.sh (builds the module first), or
     python3 ffi/nginx/test_controls.py --module path/to/ngx_http_fairq_module.so
"""

import argparse
import asyncio
import collections
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "ffi", "python"))

from test_nginx import (  # noqa: E402  (after the path set-up)
    FAILURES, Conn, check, conf_head, free_port, metric, parse_prometheus, pct, verdict,
    wait_port)

C = 8                 # fairq_max_in_flight, and each upstream's concurrency
SERVICE_MS = 50       # upstream service time (mean, +-20 %)
PHASE_S = 5.0
WARMUP_S = 1.0
FEEDBACK_PERIOD_MS = 60000   # the controller's shortest period
BOOST_CROWD = 48      # weight-1 tenants (one weight class), 2 conns each: a standing queue
BOOST_BULK = 800      # the weight of the tenant they share the permits with
BOOST_S = 8.0
BOOST_WINDOW_S = 3.0  # the crowd's first grants come through the light-tenant lane: skipped


# ---------------------------------------------------------------------------------- upstream

def run_backend(port, concurrency, service_ms):
    """At most `concurrency` requests in service at once; `?sleep=ms` sets a request's service
    time, `?fail=P` answers 500 to P % of such requests, evenly spread (with P = 10, every 10th
    one), so every window of a dozen or more of them holds its share of failures."""
    rng = random.Random(port)
    fail_marked = [0]

    async def main():
        sem = asyncio.Semaphore(concurrency)

        async def handle(reader, writer):
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                m = re.search(r"[?&]sleep=(\d+)", target)
                delay = int(m.group(1)) if m else service_ms * rng.uniform(0.8, 1.2)
                m = re.search(r"[?&]fail=(\d+)", target)
                status = b"200 OK"
                if m:
                    n, percent = fail_marked[0], int(m.group(1))
                    fail_marked[0] += 1
                    if (n + 1) * percent // 100 > n * percent // 100:
                        status = b"500 Internal Server Error"
                async with sem:
                    await asyncio.sleep(delay / 1000)
                body = b"served " + target.encode() + b"\n"
                writer.write(b"HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d"
                             b"\r\nConnection: close\r\n\r\n%s" % (status, len(body), body))
                await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---------------------------------------------------------------------------------- clients

async def get(port, path, headers=None):
    conn = Conn(port)
    try:
        return await conn.request(path, headers)
    finally:
        conn.close()


async def loop(port, path, headers, conns, until, out, pause_after_429=0.0):
    """`conns` keep-alive connections sending requests back to back until `until` (pausing
    `pause_after_429` s after a 429, as a client honouring it a little would)."""

    async def worker():
        conn = Conn(port)
        try:
            while time.monotonic() < until:
                r = await conn.request(path, headers)
                out.append(r)
                if r.status == 429 and pause_after_429:
                    await asyncio.sleep(pause_after_429)
        finally:
            conn.close()

    await asyncio.gather(*(worker() for _ in range(conns)))


def completed(responses, t1, t2):
    return sum(1 for r in responses if r.status == 200 and t1 <= r.end <= t2)


async def scrape(port, quiet=False):
    """/metrics, parsed; `quiet` (for polling) reports only a text that does not parse."""
    samples, _, errors = parse_prometheus((await get(port, "/metrics")).body.decode())
    if errors or not quiet:
        check(not errors, "/metrics parses" + (": " + "; ".join(errors[:3]) if errors else ""))
    return samples


# ---------------------------------------------------------------------------------- nginx

CONF = """\
{head}
    fairq_tenant_dimension user;
    fairq_max_in_flight {c};
    fairq_tenant_queue_size 256;
    fairq_max_wait 30s;
    fairq_weight heavy 99;
    fairq_weight bulk {bulk};
{http}
    upstream fast {{
        server 127.0.0.1:{fast_port};
    }}
    upstream slow {{
        server 127.0.0.1:{slow_port};
    }}
    map $http_x_api_key $tier {{
        gold-key   gold;
        iron-key   iron;
        plat-key   platinum;
        default    "";
    }}

    server {{
        listen 127.0.0.1:{port} reuseport;
        fairq_tenant $http_x_api_key;
        add_header X-Fairq-Dimension $fairq_tenant_dimension always;
        add_header X-Fairq-Downstream $fairq_downstream always;

        location /multi/ {{
            fairq on;
            fairq_tenant $http_x_user $http_x_team $http_x_api_key;
            proxy_pass http://fast;
        }}
        location /multi-short/ {{
            fairq on;
            fairq_tenant $http_x_user $http_x_team $http_x_api_key;
            fairq_max_wait 20ms;
            proxy_pass http://fast;
        }}
        location /fast/ {{
            fairq on;
            set $pool fast;
            fairq_downstream $pool;
            proxy_pass http://fast;
        }}
        location /slow/ {{
            fairq on;
            set $pool slow;
            fairq_downstream $pool;
            proxy_pass http://slow;
        }}
        location /flaky/ {{
            fairq on;
            set $pool flaky;
            fairq_downstream $pool;
            fairq_max_wait 300ms;
            proxy_pass http://fast;
        }}
        location /plain/ {{
            # No fairq_downstream: the "default" pool, as large as fairq_max_in_flight.
            fairq on;
            proxy_pass http://fast;
        }}
        location = /metrics {{
            fairq_metrics;
        }}
    }}
}}
"""

# The controlled nginx: every control on.
MAIN = """\
    fairq_tier gold 3;
    fairq_tier iron 1;
    fairq_tenant_tier $tier;
    fairq_starvation_guard 30 3;
    fairq_wait_boost 1000;
    fairq_pool fast 6;
    fairq_pool slow 2;
"""


class Nginx:
    """An nginx of its own under `prefix` with `http` lines at http level."""

    def __init__(self, args, prefix, ports, http, workers=1):
        os.makedirs(prefix, exist_ok=True)
        os.chmod(prefix, 0o755)
        self.args, self.prefix, self.port = args, prefix, free_port()
        self.conf = os.path.join(prefix, "nginx.conf")
        self.proc = None
        with open(self.conf, "w") as f:
            f.write(CONF.format(head=conf_head(args, prefix, workers,
                                                  what="ffi/nginx/test_controls.py"),
                                prefix=prefix, c=C, bulk=BOOST_BULK, http=http,
                                fast_port=ports[0], slow_port=ports[1], port=self.port))

    def test(self):
        return subprocess.run([self.args.nginx, "-t", "-p", self.prefix, "-c", self.conf],
                              capture_output=True, text=True)

    async def start(self):
        self.proc = subprocess.Popen([self.args.nginx, "-p", self.prefix, "-c", self.conf])
        await wait_port(self.port)

    def stop(self, what):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                check(False, f"{what}: nginx quits gracefully")
        path = os.path.join(self.prefix, "error.log")
        log = open(path).read() if os.path.exists(path) else ""
        bad = [line for line in log.splitlines()
               if re.search(r"\[(alert|crit|emerg)\]|exited on signal|segfault|core dumped",
                            line)]
        check(not bad, f"{what}: error log has no alerts or crashes"
                       + "".join("\n      " + line for line in bad[:5]))


# ---------------------------------------------------------------------------------- scenarios

def tenant_key_hex(raw):
    import fairq  # the Python binding: the same key function as the module's
    return "%016x" % fairq.tenant_key(raw)


async def tenant_values(port):
    print("- fairq_tenant $http_x_user $http_x_team $http_x_api_key", flush=True)
    cases = [({"X-User": "alice", "X-Team": "blue", "X-Api-Key": "k1"}, "user", "alice"),
             ({"X-User": "", "X-Team": "blue", "X-Api-Key": "k1"}, "team", "blue"),
             ({"X-Api-Key": "k1"}, "api_key", "k1"),
             ({"X-Team": "blue"}, "team", "blue")]
    for headers, dim, raw in cases:
        r = await get(port, "/multi/", headers)
        check(r.status == 200 and r.headers.get("x-fairq-dimension") == dim,
              f"{sorted(headers)}: 200, $fairq_tenant_dimension {dim} "
              f"({r.status}, {r.headers.get('x-fairq-dimension')})")
    r = await get(port, "/multi/", {"X-User": "", "X-Team": ""})
    fq = r.json()["error"]["details"]["fair_queue"] if r.status == 429 else {}
    check(r.status == 429 and fq.get("reason") == "no_tenant"
          and fq.get("tenant_dimension") == "user" and "x-fairq-dimension" not in r.headers,
          f"no non-empty value: 429 no_tenant, the configured dimension ({r.status} {fq})")
    samples = await scrape(port)
    for raw, want in (("alice", 1), ("blue", 2), ("k1", 1)):
        got = metric(samples, "rate_limit_fair_queue_tenant_requests_total",
                     tenant_dimension="user", tenant=tenant_key_hex(raw))
        check(got == want, f"/metrics: tenant {raw!r} (its key) has {want} requests ({got})")
    # A refusal after waiting names the dimension too: hold every permit, then a 20 ms budget.
    hold = [asyncio.create_task(get(port, "/plain/?sleep=800", {"X-Api-Key": "holder"}))
            for _ in range(C)]
    await asyncio.sleep(0.2)
    r = await get(port, "/multi-short/", {"X-Team": "red", "X-Api-Key": "k9"})
    await asyncio.gather(*hold)
    fq = r.json()["error"]["details"]["fair_queue"] if r.status == 429 else {}
    check(r.status == 429 and fq.get("tenant_dimension") == "team"
          and r.headers.get("x-fairq-dimension") == "team",
          f"429 after waiting: tenant_dimension team in the body and the header ({r.status} {fq})")


async def tier_split(port):
    """Two tenants without a tier (1:1), then two the map puts in gold (3) and iron (1)."""
    print("- fairq_tier gold 3, iron 1; fairq_tenant_tier $tier (a map of X-Api-Key)",
          flush=True)
    ratios = {}
    for label, a, b in (("no tier", "plain-a", "plain-b"), ("tiers", "gold-key", "iron-key")):
        t0 = time.monotonic()
        until = t0 + PHASE_S
        ra, rb = [], []
        await asyncio.gather(loop(port, "/plain/", {"X-Api-Key": a}, 16, until, ra),
                             loop(port, "/plain/", {"X-Api-Key": b}, 16, until, rb))
        na, nb = completed(ra, t0 + WARMUP_S, until - 0.2), completed(rb, t0 + WARMUP_S,
                                                                      until - 0.2)
        ratios[label] = na / nb if nb else float("inf")
        print(f"  {label}: {a} {na}, {b} {nb}, ratio {ratios[label]:.2f}", flush=True)
    check(abs(ratios["no tier"] - 1) <= 0.15, f"without tiers: 1:1 ({ratios['no tier']:.2f})", timing=True)
    check(abs(ratios["tiers"] - 3) <= 0.3, f"gold:iron {ratios['tiers']:.2f} within 10 % of 3", timing=True)
    await get(port, "/plain/", {"X-Api-Key": "plat-key"})    # a tier no fairq_tier names
    samples = await scrape(port)
    changes = metric(samples, "fairq_nginx_tier_changes_total")
    unknown = metric(samples, "fairq_nginx_unknown_tiers_total")
    check(changes == 1 and unknown is not None and unknown >= 1,
          f"/metrics: one tier change (gold-key 1 -> 3; iron is the default weight) ({changes}), "
          f"unknown tiers counted ({unknown})")
    return ratios["tiers"]


async def guard_share(port, label):
    """A weight-1 tenant (4 conns) against a weight-99 one (16 conns): the light one's share."""
    t0 = time.monotonic()
    until = t0 + PHASE_S
    heavy, light = [], []
    await asyncio.gather(loop(port, "/plain/", {"X-Api-Key": "heavy"}, 16, until, heavy),
                         loop(port, "/plain/", {"X-Api-Key": "light"}, 4, until, light))
    nh, nl = completed(heavy, t0 + WARMUP_S, until), completed(light, t0 + WARMUP_S, until)
    share = nl / (nh + nl) if nh + nl else 0
    print(f"  {label}: heavy {nh}, light {nl}: light's share {share:.1%}", flush=True)
    return share


async def pools(port, label, stuck=False):
    """The fast pool's tenant (4 conns) alone, or while a stuck slow upstream (4 s a request)
    has 24 conns of another tenant on it; those are dropped after the phase (their queued
    tickets are cancelled, their upstream requests aborted)."""
    t0 = time.monotonic()
    until = t0 + PHASE_S
    fast, slow = [], []
    stuck_task = None
    if stuck:
        stuck_task = asyncio.create_task(loop(port, "/slow/?sleep=4000",
                                              {"X-Api-Key": "slow-user"}, 24, t0 + 3600, slow))
        await asyncio.sleep(0.3)
    mid = {}

    async def look():
        await asyncio.sleep(PHASE_S / 2)
        mid.update(await scrape(port))

    await asyncio.gather(loop(port, "/fast/", {"X-Api-Key": "fast-user"}, 4, until, fast),
                         *([look()] if stuck else []))
    if stuck_task is not None:
        stuck_task.cancel()
        try:
            await stuck_task
        except asyncio.CancelledError:
            pass
    window = [r.latency for r in fast if r.start >= t0 + WARMUP_S and r.status == 200]
    p95 = pct(window, 95) * 1000
    statuses = collections.Counter(r.status for r in fast)
    print(f"  {label}: fast pool n={len(window)} p95 {p95:.1f} ms {dict(statuses)}",
          flush=True)
    return p95, fast, mid


async def crowd_share(port, until, window, mid=None):
    """BOOST_CROWD weight-1 tenants (2 conns each, so each keeps a request queued) against
    `bulk` (weight BOOST_BULK, 16 conns) until `until`: the crowd's share of the requests served
    in `window`. Their class's weight is 48 against 800, so each crowd tenant waits some 5 s
    between its grants, and `bulk` is served all the time. `mid` gets /metrics halfway."""
    bulk, crowd = [], []
    looks = []
    if mid is not None:
        async def look():
            await asyncio.sleep((until - time.monotonic()) / 2)
            mid.update(await scrape(port))
        looks.append(look())
    await asyncio.gather(
        loop(port, "/plain/", {"X-Api-Key": "bulk"}, 16, until, bulk),
        *(loop(port, "/plain/", {"X-Api-Key": f"crowd-{i}"}, 2, until, crowd)
          for i in range(BOOST_CROWD)),
        *looks)
    nb, nc = completed(bulk, *window), completed(crowd, *window)
    return (nc / (nb + nc) if nb + nc else 0), nc, nb


async def boost(args, prefix, ports, control):
    """The boost raises the weight of a waiting tenant's class by 1 until the tenant is served:
    a crowd of weight-1 tenants that each wait seconds for their turn gets a larger share with
    it. The same traffic at once on an nginx with the boost and on the plain one (each with
    its own upstream)."""
    print(f"- fairq_wait_boost 1000: {BOOST_CROWD} weight-1 tenants against one of weight "
          f"{BOOST_BULK}, with the boost and without", flush=True)
    ng = Nginx(args, os.path.join(prefix, "boost"), (ports[2], ports[1]),
               "    fairq_wait_boost 1000;\n")
    await ng.start()
    try:
        t0 = time.monotonic()
        until = t0 + BOOST_S
        window = (t0 + BOOST_WINDOW_S, until)
        mid = {}
        (on, on_crowd, on_bulk), (off, off_crowd, off_bulk) = await asyncio.gather(
            crowd_share(ng.port, until, window, mid), crowd_share(control.port, until, window))
        print(f"  {BOOST_S - BOOST_WINDOW_S:.0f} s: crowd {on_crowd}, bulk {on_bulk} with the "
              f"boost (crowd's share {on:.1%}); crowd {off_crowd}, bulk {off_bulk} without "
              f"({off:.1%})", flush=True)
        check(off > 0 and on >= 1.3 * off,
              f"the boost raises the waiting class's share: {on:.1%} against {off:.1%} without "
              f"(x{on / off if off else float('inf'):.2f}, at least x1.3)", timing=True)
        boosted = metric(mid, "rate_limit_fair_queue_boosted_tenants", tenant_dimension="user")
        samples = await scrape(ng.port)
        started = metric(samples, "fairq_nginx_boosts_started_total")
        check(boosted is not None and boosted >= 1 and started >= BOOST_CROWD,
              f"/metrics: boosted_tenants {boosted} halfway, boosts started {started} (at "
              f"least one per crowd tenant)", timing=True)
        return on, off
    finally:
        ng.stop("boost")


def nginx_t_refuses(args, prefix, ports):
    print("- nginx -t names a bad value of each directive", flush=True)
    cases = [
        ("fairq_tier gold 3;\n    fairq_tier GOLD 2;", "duplicate tier"),
        ("fairq_tier bad*name 3;", "policy.tiers"),
        ("fairq_tier gold 0;", "invalid weight"),
        ("fairq_starvation_guard 30 60;", "policy.starvation_guard.min_share_percent"),
        ("fairq_starvation_guard 0 3;", "invalid fairq_starvation_guard"),
        ("fairq_wait_boost 500;", "policy.wait_boost.after_ms"),
        ("fairq_wait_boost 2s 0;", "policy.wait_boost.max_boosted"),
        ("fairq_feedback 1000 50 200;", "policy.feedback.period_ms"),
        ("fairq_feedback 5m 5 200;", "policy.feedback.floor_percent"),
        ("fairq_feedback 5m 50 2000;", "policy.feedback.ceiling_percent"),
        ("fairq_pool slow 9;", "downstream_max_in_flight"),
        ("fairq_pool slow 2;\n    fairq_pool slow 3;", "duplicate pool"),
        ("fairq_pool bad/name 2;", "invalid pool name"),
        ("fairq_shed 2 1000;", "set downstream_max_in_flight"),
        ("fairq_pool a 2;\n    fairq_shed 101 1000;", "shedding.error_percent"),
        ("fairq_pool a 2;\n    fairq_shed 2 50;", "shedding.window_ms"),
        ("fairq_pool a 2;\n    fairq_shed 0 1000;", "invalid fairq_shed"),
    ]
    for i, (lines, want) in enumerate(cases):
        t = Nginx(args, os.path.join(prefix, f"t{i}"), ports, "    " + lines + "\n").test()
        last = (t.stderr.strip().splitlines() or ["(nothing)"])
        line = next((x for x in last if "emerg" in x), last[-1])
        check(t.returncode != 0 and want in t.stderr,
              f"{lines.splitlines()[0]!r}: refused naming {want!r}: "
              f"{line.split('[emerg]')[-1].strip()[:150]}")
    t = Nginx(args, os.path.join(prefix, "t-ok"), ports,
              MAIN + "    fairq_feedback 5m 50% 200%;\n").test()
    check(t.returncode == 0, "every control at once (times and percents as written): nginx -t ok"
                             + ("" if t.returncode == 0 else ": " + t.stderr.strip()))


async def shedding(args, prefix, ports):
    print("- fairq_pool flaky 6; fairq_shed 2 1s: the upstream answers 500 to 10 %",
          flush=True)
    ng = Nginx(args, os.path.join(prefix, "shed"), ports,
               "    fairq_pool flaky 6;\n    fairq_shed 2 1s;\n")
    t = ng.test()
    check(t.returncode == 0, "nginx -t accepts fairq_shed"
                             + ("" if t.returncode == 0 else ": " + t.stderr.strip()))
    if t.returncode != 0:
        return None
    await ng.start()
    labels = {"tenant_dimension": "user", "downstream": "0"}
    try:
        t0 = time.monotonic()
        out, mid = [], {}

        async def look():
            await asyncio.sleep(4.0)
            mid.update(await scrape(ng.port))

        await asyncio.gather(loop(ng.port, "/flaky/?fail=10", {"X-Api-Key": "flaky-user"}, 12,
                                  t0 + 5.0, out, pause_after_429=0.05), look())
        statuses = collections.Counter(r.status for r in out)
        served = statuses[200] + statuses[500]
        shed = [r for r in out if r.status == 429
                and r.json()["error"]["details"]["fair_queue"]["reason"] == "downstream_shedding"]
        print(f"  5 s, 12 conns: {dict(statuses)}; shed {len(shed)}", flush=True)
        check(served and 0.05 <= statuses[500] / served <= 0.15,
              f"the upstream failed {statuses[500]} of {served} served", timing=True)
        limit = metric(mid, "rate_limit_fair_queue_downstream_limit", **labels)
        stage = metric(mid, "rate_limit_fair_queue_downstream_shedding", **labels)
        cuts = metric(mid, "rate_limit_fair_queue_downstream_shed_cuts_total", **labels)
        ratio = metric(mid, "rate_limit_fair_queue_downstream_error_ratio", **labels)
        check(stage == 1 and limit is not None and limit < 6 and cuts >= 1
              and ratio is not None and 0.02 < ratio < 0.3,
              f"/metrics after 4 s: shedding stage {stage}, limit {limit} of 6, cuts {cuts}, "
              f"last window's error ratio {ratio}", timing=True)
        check(len(shed) > 0 and all(r.latency < 0.15 for r in shed),
              f"429 downstream_shedding answered at once ({len(shed)}, slowest "
              f"{max((r.latency for r in shed), default=0) * 1000:.0f} ms)", timing=True)
        await asyncio.sleep(0.5)
        samples = await scrape(ng.port)
        engine = metric(samples, "rate_limit_fair_queue_refused_total",
                        tenant_dimension="user", reason="downstream_shedding")
        module = metric(samples, "fairq_nginx_refused_total", reason="downstream_shedding")
        check(engine == len(shed) and module == len(shed),
              f"refused_total{{reason=downstream_shedding}} engine {engine}, module {module} == "
              f"clients' {len(shed)}")
        # Calm traffic: one step (6 / 8, at least 1) a window, back to 6 in 5 windows.
        calm = []
        await loop(ng.port, "/flaky/", {"X-Api-Key": "calm-user"}, 4, time.monotonic() + 8.0,
                   calm)
        samples = await scrape(ng.port)
        limit = metric(samples, "rate_limit_fair_queue_downstream_limit", **labels)
        stage = metric(samples, "rate_limit_fair_queue_downstream_shedding", **labels)
        check(limit == 6 and stage == 0 and all(r.status == 200 for r in calm),
              f"8 s of calm traffic: limit back to {limit} of 6, stage {stage}", timing=True)
        return statuses, len(shed)
    finally:
        ng.stop("shedding")


async def ticks_in_each_worker(ng, started):
    """The 2-worker nginx with a feedback controller: each worker ticks, and its controller
    ran a period (the first tick takes the baseline; the first run comes a period later)."""
    print(f"- fairq_feedback {FEEDBACK_PERIOD_MS} 50 200 in 2 workers: each worker's timer",
          flush=True)
    left = started + FEEDBACK_PERIOD_MS / 1000 + 2.5 - time.monotonic()
    if left > 0:
        print(f"  waiting {left:.0f} s for the first period to end", flush=True)
        await asyncio.sleep(left)
    seen = {}
    for _ in range(200):
        samples = await scrape(ng.port)
        pids = [dict(k[1])["pid"] for k in samples if k[0] == "fairq_nginx_worker_info"]
        if pids:
            seen[pids[0]] = (metric(samples, "fairq_nginx_policy_ticks_total"),
                             metric(samples, "fairq_nginx_feedback_runs_total"))
        if len(seen) == 2:
            break
    print(f"  per worker pid: (ticks, feedback runs) {seen}", flush=True)
    check(len(seen) == 2 and all(t >= FEEDBACK_PERIOD_MS / 1000 - 2 and runs >= 1
                                 for t, runs in seen.values()),
          f"both workers tick every second and ran a feedback period ({seen})", timing=True)


# The feedback nginx: fb-over and fb-twin weigh 2 alike. In the controller's first period
# fb-over has a guard's third of the grants against fb-big, where its weight gives it a fifth;
# fb-twin is only idle. After the period fb-over should weigh 1 (its floor, 50 % of 2).
FEEDBACK = f"""\
    fairq_feedback {FEEDBACK_PERIOD_MS} 50 200;
    fairq_starvation_guard 1 30;
    fairq_weight fb-over 2;
    fairq_weight fb-twin 2;
    fairq_weight fb-peer 2;
    fairq_weight fb-big 8;
"""


def tenant_metric(samples, name, raw):
    return metric(samples, "rate_limit_fair_queue_tenant_" + name, tenant_dimension="user",
                  tenant=tenant_key_hex(raw))


async def over_serve(ng):
    """The feedback nginx's first period: fb-over, fb-twin and fb-peer each send a request
    before the worker's first tick, so each holds its slot when that tick takes the
    controller's baseline (a tenant that comes later is judged a period later). Then fb-over
    (16 conns) against fb-big (16 conns) until fb-over expected 150 cost units (the controller
    judges from 100), its fair-share ratio well above 110 %."""
    print(f"- fairq_feedback {FEEDBACK_PERIOD_MS} 50 200, fairq_starvation_guard 1 30: the "
          f"first period over-serves fb-over (weight 2) against fb-big (weight 8)", flush=True)
    for raw in ("fb-over", "fb-twin", "fb-peer"):
        await get(ng.port, "/plain/", {"X-Api-Key": raw})
    ticks = metric(await scrape(ng.port), "fairq_nginx_policy_ticks_total")
    check(ticks == 0, f"the tenants took their slots before the first tick (ticks {ticks})",
          timing=True)
    deadline = time.monotonic() + 5.0
    while (not metric(await scrape(ng.port, quiet=True), "fairq_nginx_policy_ticks_total")
           and time.monotonic() < deadline):
        await asyncio.sleep(0.1)
    samples = await scrape(ng.port)
    ticks = metric(samples, "fairq_nginx_policy_ticks_total")
    check(ticks is not None and ticks >= 1, f"the first tick came ({ticks}): it took the "
          f"controller's baseline", timing=True)
    base = [tenant_metric(samples, name, "fb-over") or 0
            for name in ("expected_cost_total", "granted_cost_total")]
    stop = [time.monotonic() + 12.0]
    out = []

    async def worker(raw):
        conn = Conn(ng.port)
        try:
            while time.monotonic() < stop[0]:
                out.append((raw, await conn.request("/plain/", {"X-Api-Key": raw})))
        finally:
            conn.close()

    async def watch():
        while time.monotonic() < stop[0]:
            await asyncio.sleep(0.5)
            expected = tenant_metric(await scrape(ng.port, quiet=True), "expected_cost_total",
                                     "fb-over")
            if expected is not None and expected - base[0] >= 150:
                stop[0] = time.monotonic()

    t0 = time.monotonic()
    await asyncio.gather(*(worker(raw) for raw in ("fb-over", "fb-big") for _ in range(16)),
                         watch())
    samples = await scrape(ng.port)
    expected, granted = [(tenant_metric(samples, name, "fb-over") or 0) - b
                         for name, b in zip(("expected_cost_total", "granted_cost_total"), base)]
    ratio = granted / expected if expected else 0.0
    counts = collections.Counter(raw for raw, r in out if r.status == 200)
    print(f"  {time.monotonic() - t0:.1f} s: fb-over {counts['fb-over']}, fb-big "
          f"{counts['fb-big']}", flush=True)
    check(expected >= 100 and ratio > 1.1,
          f"fb-over over-served in the period: granted {granted:.0f} cost units where its "
          f"weight expected {expected:.0f} (the controller judges from 100): ratio "
          f"{ratio:.2f} (above 1.1 lowers its weight)", timing=True)


async def split(port, a, b, label):
    """`a` against `b`, 16 conns each: `a`'s completions over `b`'s."""
    t0 = time.monotonic()
    until = t0 + 3.5
    ra, rb = [], []
    await asyncio.gather(loop(port, "/plain/", {"X-Api-Key": a}, 16, until, ra),
                         loop(port, "/plain/", {"X-Api-Key": b}, 16, until, rb))
    na, nb = completed(ra, t0 + WARMUP_S, until - 0.2), completed(rb, t0 + WARMUP_S,
                                                                  until - 0.2)
    ratio = na / nb if nb else float("inf")
    print(f"  {label}: {a} {na}, {b} {nb}, ratio {ratio:.2f}", flush=True)
    return ratio


async def feedback_effect(ng, started):
    """After the feedback nginx's first period: fb-over weighs 1, so fb-peer (weight 2) has two
    grants to its one, while fb-twin, idle in the period, still splits 1:1 with fb-peer."""
    print("- fairq_feedback: after the first period, fb-over against fb-peer (both weigh 2), "
          "and fb-twin against fb-peer", flush=True)
    left = started + FEEDBACK_PERIOD_MS / 1000 + 1.5 - time.monotonic()
    if left > 0:
        print(f"  waiting {left:.0f} s for the first period to end", flush=True)
        await asyncio.sleep(left)
    deadline = time.monotonic() + 5.0
    while True:
        samples = await scrape(ng.port, quiet=True)
        runs = metric(samples, "fairq_nginx_feedback_runs_total")
        if runs or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    lowered = metric(samples, "fairq_nginx_feedback_weights_total", direction="lowered")
    check(runs == 1 and lowered is not None and lowered >= 1,
          f"/metrics: the controller ran its first period ({runs}) and lowered a weight "
          f"({lowered})", timing=True)
    nudged = await split(ng.port, "fb-over", "fb-peer", "over-served in the period")
    twin = await split(ng.port, "fb-twin", "fb-peer", "idle in the period")
    check(abs(twin - 1) <= 0.15 and 0.35 <= nudged <= 0.65,
          f"fb-over's split with fb-peer {nudged:.2f} (its weight lowered to 1: 1:2), fb-twin's "
          f"{twin:.2f} (1:1)", timing=True)
    return nudged, twin


async def run(args):
    prefix = tempfile.mkdtemp(prefix="fairq-nginx-controls-")
    os.chmod(prefix, 0o755)
    # fast, slow, and a third like fast for the nginx that runs next to the plain one.
    ports = (free_port(), free_port(), free_port())
    backends = [subprocess.Popen([sys.executable, __file__, "--backend", str(p)])
                for p in ports]
    main = control = ticking = feedback = None
    try:
        for p in ports:
            await wait_port(p)
        nginx_t_refuses(args, prefix, ports)

        # The feedback nginxes first: their first period runs while the rest is tested.
        ticking = Nginx(args, os.path.join(prefix, "ticking"), ports,
                        f"    fairq_wait_boost 1000;\n"
                        f"    fairq_feedback {FEEDBACK_PERIOD_MS} 50 200;\n", workers=2)
        await ticking.start()
        ticking_started = time.monotonic()
        feedback = Nginx(args, os.path.join(prefix, "feedback"), (ports[2], ports[1]), FEEDBACK)
        await feedback.start()
        feedback_started = time.monotonic()
        await over_serve(feedback)

        main = Nginx(args, os.path.join(prefix, "main"), ports, MAIN)
        control = Nginx(args, os.path.join(prefix, "control"), ports, "")
        for ng in (main, control):
            t = ng.test()
            check(t.returncode == 0, "nginx -t accepts the configuration"
                                     + ("" if t.returncode == 0 else ": " + t.stderr.strip()))
            if t.returncode != 0:
                return
            await ng.start()
        print(f"prefix {prefix}: controlled nginx :{main.port}, plain nginx :{control.port}, "
              f"upstreams :{ports[0]} (fast) :{ports[1]} (slow), {C} at once each", flush=True)

        await tenant_values(main.port)
        ratio = await tier_split(main.port)

        print("- fairq_starvation_guard 30 3: weight 1 against weight 99", flush=True)
        on = await guard_share(main.port, "guard on")
        off = await guard_share(control.port, "guard off")
        check(0.025 <= on <= 0.06, f"guard on: the light tenant's share {on:.1%} is at its 3 % "
                                   f"floor", timing=True)
        check(off < 0.02, f"guard off: the light tenant's share {off:.1%} is its weight's, "
                          f"about 1 %", timing=True)
        samples = await scrape(main.port)
        gg = metric(samples, "rate_limit_fair_queue_guard_grants_total", tenant_dimension="user")
        check(gg is not None and gg > 0, f"/metrics: guard_grants_total {gg}")

        print("- fairq_pool fast 6, slow 2; fairq_downstream $pool", flush=True)
        alone, _, _ = await pools(main.port, "alone")
        stuck, fast, mid = await pools(main.port, "slow upstream stuck (4 s a request)", True)
        check(all(r.status == 200 and r.headers.get("x-fairq-downstream") == "fast"
                  for r in fast), "fast pool: every request served, $fairq_downstream fast")
        check(stuck <= 1.5 * alone,
              f"fast pool p95 {stuck:.1f} ms within 1.5x of alone {alone:.1f} ms "
              f"(x{stuck / alone:.2f})", timing=True)
        labels = {"tenant_dimension": "user", "downstream": "1"}
        slow_in_flight = metric(mid, "rate_limit_fair_queue_downstream_in_flight", **labels)
        slow_blocked = metric(mid, "rate_limit_fair_queue_downstream_blocked_tenants", **labels)
        info = metric(mid, "fairq_nginx_pool_info", downstream="1", pool="slow",
                      max_in_flight="2")
        check(info == 1 and slow_in_flight == 2 and slow_blocked == 1,
              f"/metrics mid-phase: pool slow is downstream 1, in flight {slow_in_flight} "
              f"(its bound 2), its tenant blocked on it ({slow_blocked})", timing=True)
        nopools, _, _ = await pools(control.port, "no pools, slow upstream stuck", True)
        check(nopools >= 3 * alone,
              f"without pools the stuck upstream takes the permits: fast p95 {nopools:.0f} ms "
              f"(x{nopools / alone:.1f} alone)", timing=True)
        await asyncio.sleep(1.0)

        boost_on, boost_off = await boost(args, prefix, ports, control)
        shed = await shedding(args, prefix, ports)
        await ticks_in_each_worker(ticking, ticking_started)
        nudged, twin = await feedback_effect(feedback, feedback_started)

        print(f"\nMEASURED: tiers gold:iron {ratio:.2f}; guard light share {on:.1%} (off "
              f"{off:.1%}); fast pool p95 alone {alone:.1f} ms, slow stuck {stuck:.1f} ms "
              f"(x{stuck / alone:.2f}), without pools {nopools:.0f} ms; crowd's share with the "
              f"boost {boost_on:.1%} (without {boost_off:.1%}); after a feedback period "
              f"fb-over:fb-peer {nudged:.2f} (fb-twin:fb-peer {twin:.2f}); shedding: "
              f"{dict(shed[0]) if shed else None}, {shed[1] if shed else 0} refused "
              f"downstream_shedding", flush=True)
    finally:
        for ng, what in ((main, "controlled"), (control, "plain"), (ticking, "2 workers"),
                         (feedback, "feedback")):
            if ng is not None:
                ng.stop(what)
        for b in backends:
            b.terminate()
            b.wait()
        if FAILURES or args.keep:
            print(f"(kept {prefix} for inspection)")
        else:
            shutil.rmtree(prefix, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", help="path of ngx_http_fairq_module.so")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--keep", action="store_true", help="keep the temporary prefix")
    ap.add_argument("--backend", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.backend:
        run_backend(args.backend, C, SERVICE_MS)
        return
    if not args.module:
        ap.error("--module is required")
    started = time.monotonic()
    asyncio.run(run(args))
    sys.exit(verdict(started))


if __name__ == "__main__":
    main()
