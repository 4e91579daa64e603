"""Tests of the ctypes binding, with the standard library only:

    python3 -m unittest discover -s ffi/python -v

They need libfairq.so (``cargo build``), found under target/ or through FAIRQ_LIB.
"""

import ctypes
import os
import re
import threading
import unittest

import fairq

MS = 1_000_000
T0 = 1000 * MS
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class NamesAndVersion(unittest.TestCase):
    def test_version_matches_header(self):
        with open(os.path.join(ROOT, "include", "fairq.h")) as f:
            header = f.read()
        parts = [re.search(r"#define FAIRQ_VERSION_%s (\d+)" % p, header).group(1)
                 for p in ("MAJOR", "MINOR", "PATCH")]
        self.assertEqual(fairq.version(), ".".join(parts))

    def test_package_version_matches_header(self):
        with open(os.path.join(ROOT, "include", "fairq.h")) as f:
            header = f.read()
        parts = [re.search(r"#define FAIRQ_VERSION_%s (\d+)" % p, header).group(1)
                 for p in ("MAJOR", "MINOR", "PATCH")]
        with open(os.path.join(ROOT, "ffi", "python", "pyproject.toml")) as f:
            pyproject = f.read()
        self.assertEqual(fairq.__version__, ".".join(parts))
        self.assertIn('\nversion = "%s"\n' % fairq.__version__, pyproject)
        self.assertTrue(os.path.exists(fairq.library_path) or "/" not in fairq.library_path,
                        fairq.library_path)

    def test_constants_match_header(self):
        with open(os.path.join(ROOT, "include", "fairq.h")) as f:
            header = f.read()
        defines = dict(re.findall(r"#define FAIRQ_(\w+) \(?(-?\d+)\)?", header))
        for name, value in defines.items():
            if name.startswith("VERSION_"):
                continue
            self.assertEqual(getattr(fairq, name), int(value), name)

    def test_struct_fields_match_header(self):
        with open(os.path.join(ROOT, "include", "fairq.h")) as f:
            header = f.read()
        for name, cls in fairq.C_STRUCTS.items():
            body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), header, re.S)
            self.assertIsNotNone(body, name)
            code = "\n".join(line for line in body.group(1).splitlines()
                             if not line.strip().startswith("//"))
            fields = re.findall(r"(\w+)(?:\[\w+\])?;", code)
            self.assertEqual([f for f, _ in cls._fields_], fields, name)

    def test_names(self):
        self.assertEqual(fairq.status_name(fairq.ERR_STALE_TICKET), "FAIRQ_ERR_STALE_TICKET")
        self.assertEqual(fairq.reason_name(fairq.REASON_QUEUE_FULL), "queue_full")
        self.assertEqual(fairq.dimension_name(fairq.DIM_API_KEY), "api_key")
        self.assertGreater(fairq.now_ns(), 0)
        self.assertEqual(fairq.tenant_key("acme"), fairq.tenant_key(b"acme"))
        with self.assertRaises(fairq.FairqError) as err:
            fairq.tenant_key("")
        self.assertEqual(err.exception.name, "FAIRQ_ERR_INVALID_ARGUMENT")

    def test_tenant_key_vectors(self):
        # XXH3-64, seed 0, over the raw bytes: the same keys as every other binding and build.
        # (Over no bytes it is 0x2d06800538d394c2, but an empty identifier is refused above.)
        self.assertEqual(fairq.tenant_key("acme"), 0x44AD98655D8858E1)
        self.assertEqual(fairq.tenant_key("0123456789abcdef" * 64), 0x540FFCCBF24EA528)
        self.assertEqual(fairq.tenant_key("naïve-租户"), 0xD812649601F883B6)
        self.assertEqual(len("naïve-租户".encode()), 13)


class Shares(unittest.TestCase):
    def test_three_to_one(self):
        with fairq.Engine(enabled=True, tenant_queue_capacity=1024) as q:
            q.set_weight("acme", 3)
            self.assertEqual(q.weight_of("acme"), 3)
            self.assertEqual(q.weight_of("globex"), 1)
            for i in range(400):
                self.assertTrue(q.enqueue("acme", user_data=i, now_ns=T0).queued)
                self.assertTrue(q.enqueue("globex", user_data=i, now_ns=T0).queued)
            acme = fairq.tenant_key("acme")
            for window in range(100):
                got = 0
                for _ in range(4):
                    g = q.next_grant(now_ns=T0 + MS)
                    self.assertFalse(g.expired)
                    got += g.tenant_key == acme
                    self.assertEqual(q.complete(g.ticket, now_ns=T0 + MS).status, "completed")
                self.assertEqual(got, 3, "window %d" % window)
            self.assertEqual(q.tenant_granted("acme"), (300, 300))

    def test_replace_weights(self):
        with fairq.Engine(enabled=True) as q:
            q.replace_weights({"a": 4, fairq.tenant_key("b"): 2}, default_weight=1)
            self.assertEqual((q.weight_of("a"), q.weight_of("b"), q.weight_of("c")), (4, 2, 1))
            with self.assertRaises(fairq.FairqError) as err:
                q.replace_weights({"a": 0})
            self.assertEqual(err.exception.status, fairq.ERR_INVALID_ARGUMENT)
            self.assertEqual(q.weight_of("a"), 4)


class Refusals(unittest.TestCase):
    def test_every_reason(self):
        with fairq.Engine(max_tenants=2, tenant_queue_capacity=2, queue_capacity=3,
                          max_wait_ms=100, tenant_idle_ms=60000) as q:
            self.assertFalse(q.enabled)
            self.assertEqual(q.enqueue("a", now_ns=T0).reason, "disabled")
            q.set_enabled(True)
            self.assertEqual(q.enqueue("a", dimension=fairq.DIM_GLOBAL, now_ns=T0).reason,
                             "not_queueable")
            self.assertEqual(q.enqueue(None, now_ns=T0).reason, "no_tenant")
            self.assertEqual(q.enqueue("a", retry_after_ns=200 * MS, now_ns=T0).reason,
                             "wait_exceeds_budget")
            first = q.enqueue("a", user_data=77, timeout_ns=10 * MS, now_ns=T0)
            self.assertTrue(first.queued)
            self.assertTrue(q.enqueue("a", now_ns=T0).queued)
            full = q.enqueue("a", now_ns=T0)
            self.assertEqual((full.reason, full.position), ("tenant_queue_full", 3))
            self.assertTrue(q.enqueue("b", now_ns=T0).queued)
            self.assertEqual(q.enqueue("b", now_ns=T0).reason, "queue_full")
            self.assertEqual(q.enqueue("c", now_ns=T0).reason, "tenant_table_full")
            expired = q.next_grant(now_ns=T0 + 20 * MS)
            self.assertTrue(expired.expired)
            self.assertEqual((expired.user_data, expired.reason), (77, "deadline_exceeded"))
            g = q.next_grant(now_ns=T0 + 20 * MS)
            q.cancel(g.ticket, now_ns=T0 + 20 * MS)
            refused = q.stats()["refused"]
            for reason in ("disabled", "not_queueable", "no_tenant", "wait_exceeds_budget",
                           "tenant_queue_full", "queue_full", "tenant_table_full",
                           "deadline_exceeded", "cancelled"):
                self.assertEqual(refused[reason], 1, reason)

    def test_requeue_then_refused_after_wait(self):
        with fairq.Engine(enabled=True, max_wait_ms=100) as q:
            q.enqueue("a", user_data=5, now_ns=T0)
            g = q.next_grant(now_ns=T0)
            c = q.complete(g.ticket, admitted=False, retry_after_ns=10 * MS, now_ns=T0 + MS)
            self.assertEqual((c.status, c.position), ("requeued", 1))
            self.assertIsNone(q.next_grant(now_ns=T0 + 2 * MS))
            self.assertIsNotNone(q.next_wakeup_ns())
            g = q.next_grant(now_ns=T0 + 20 * MS)
            self.assertEqual(g.user_data, 5)
            c = q.complete(g.ticket, admitted=False, retry_after_ns=500 * MS, now_ns=T0 + 21 * MS)
            self.assertEqual((c.status, c.reason), ("refused", "wait_exceeds_budget"))


class Errors(unittest.TestCase):
    def test_errors_carry_the_status_name(self):
        with fairq.Engine(enabled=True) as q:
            q.enqueue("a", now_ns=T0)
            g = q.next_grant(now_ns=T0)
            q.complete(g.ticket, actual_cost=2, now_ns=T0)
            with self.assertRaises(fairq.FairqError) as err:
                q.complete(g.ticket, now_ns=T0)
            self.assertEqual(err.exception.name, "FAIRQ_ERR_STALE_TICKET")
            self.assertEqual(err.exception.status, fairq.ERR_STALE_TICKET)
            with self.assertRaises(fairq.FairqError) as err:
                q.cancel(0xdeadbeef)
            self.assertEqual(err.exception.name, "FAIRQ_ERR_STALE_TICKET")
            with self.assertRaises(fairq.FairqError) as err:
                q.enqueue("a", dimension=42)
            self.assertEqual(err.exception.name, "FAIRQ_ERR_INVALID_ARGUMENT")

    def test_invalid_config_names_the_field(self):
        with self.assertRaises(fairq.FairqError) as err:
            fairq.Engine(max_in_flight=0)
        self.assertEqual(err.exception.name, "FAIRQ_ERR_INVALID_CONFIG")
        self.assertIn("max_in_flight", str(err.exception))

    def test_closed_engine_is_a_null_handle(self):
        q = fairq.Engine(enabled=True)
        with q:
            pass
        q.close()  # idempotent
        with self.assertRaises(fairq.FairqError) as err:
            q.stats()
        self.assertEqual(err.exception.name, "FAIRQ_ERR_NULL")

    def test_resolve_tenant_fallback(self):
        with fairq.Engine(tenant_dimension=fairq.TENANT_DIM_TEAM) as q:
            self.assertEqual(q.resolve_tenant(user="alice", team="blue"),
                             (fairq.tenant_key("blue"), "team"))
            self.assertEqual(q.resolve_tenant(user="alice", team="x", team_is_placeholder=True),
                             (fairq.tenant_key("alice"), "user"))
            self.assertEqual(q.resolve_tenant(api_key="k1"), (fairq.tenant_key("k1"), "api_key"))
            self.assertIsNone(q.resolve_tenant(user=""))

    def test_metrics(self):
        with fairq.Engine(enabled=True) as q:
            q.enqueue("a")
            text = q.metrics()
            self.assertIn("rate_limit_fair_queue_depth 1\n", text)
            self.assertIn('reason="tenant_table_full"', text)


class Threads(unittest.TestCase):
    def test_four_threads_conserve_every_ticket(self):
        iterations = 5000
        with fairq.Engine(enabled=True, max_in_flight=3, tenant_queue_capacity=256,
                          queue_capacity=2048) as q:
            tallies = []
            lock = threading.Lock()

            def worker(n):
                t = {"queued": 0, "completed": 0, "cancelled": 0, "expired": 0, "ops": 0}
                for i in range(iterations):
                    r = q.enqueue("t%d-%d" % (n, i % 4), user_data=i)
                    t["ops"] += 1
                    if r.queued and i % 11 == 0:
                        try:
                            q.cancel(r.ticket)
                            t["cancelled"] += 1
                        except fairq.FairqError as e:  # granted and ended by another thread
                            self.assertIn(e.status, (fairq.ERR_STALE_TICKET,
                                                     fairq.ERR_TICKET_STATE))
                        t["ops"] += 1
                    t["queued"] += r.queued
                    g = q.next_grant()
                    t["ops"] += 1
                    if g is None:
                        continue
                    if g.expired:
                        t["expired"] += 1
                        continue
                    try:
                        q.complete(g.ticket)
                        t["completed"] += 1
                    except fairq.FairqError as e:  # cancelled by its enqueuer first
                        self.assertEqual(e.status, fairq.ERR_STALE_TICKET)
                    t["ops"] += 1
                with lock:
                    tallies.append(t)

            threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            total = {k: sum(t[k] for t in tallies) for k in tallies[0]}
            while True:  # drain
                g = q.next_grant()
                if g is None:
                    break
                if g.expired:
                    total["expired"] += 1
                else:
                    q.complete(g.ticket)
                    total["completed"] += 1
            s = q.stats()
            self.assertEqual(len(tallies), 4)
            self.assertEqual((s["queued"], s["in_flight"]), (0, 0))
            self.assertEqual(s["enqueued"], total["queued"])
            self.assertEqual(s["completed"], total["completed"])
            self.assertEqual(s["cancelled"], total["cancelled"])
            self.assertEqual(s["expired"], total["expired"])
            self.assertEqual(s["enqueued"],
                             s["completed"] + s["cancelled"] + s["expired"]
                             + s["refused_after_wait"])


if __name__ == "__main__":
    unittest.main()
