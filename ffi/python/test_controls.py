"""Tests of the binding's controls, indicators, status dump and fleet mode, with the standard
library only:

    python3 -m unittest discover -s ffi/python -v

Fleet mode needs a library built with it (``cargo build -p fairq --features fleet``, found
through FAIRQ_LIB) and ``redis-server`` on PATH; each fleet test starts its own server on a free
port. With a library built without fleet mode those tests are skipped, and say so.
"""

import json
import math
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import fairq

MS = 1_000_000
S = 1000 * MS
T0 = 1000 * MS


def drain(q, now_ns):
    """Grants and completes everything ready; returns the tenant keys granted, in order."""
    order = []
    while (g := q.next_grant(now_ns=now_ns)) is not None:
        if not g.expired:
            order.append(g.tenant_key)
            q.complete(g.ticket, now_ns=now_ns)
    return order


class Builder(unittest.TestCase):
    def test_a_bad_control_names_its_field_and_range(self):
        cases = [
            (dict(starvation_guard=fairq.StarvationGuard(30, 51)),
             "policy.starvation_guard.min_share_percent"),
            (dict(wait_boost=fairq.WaitBoost(999)), "policy.wait_boost.after_ms"),
            (dict(feedback=fairq.FeedbackController(period_ms=1000)),
             "policy.feedback.period_ms"),
            (dict(feedback=fairq.FeedbackController(low_ratio_percent=5)),
             "policy.feedback.low_ratio_percent"),
            (dict(tiers={"pro": 4, "PRO": 2}), "duplicate tier"),
            (dict(tiers={"has space": 2}), "policy.tiers"),
            (dict(pools=[9]), "downstream_max_in_flight"),  # over max_in_flight 8
            (dict(indicator_top_k=1001), "indicator_top_k"),
            (dict(max_in_flight=0), "max_in_flight"),
        ]
        for kwargs, field in cases:
            with self.assertRaises(fairq.FairqError, msg=str(kwargs)) as err:
                fairq.Engine(enabled=True, **kwargs)
            self.assertEqual(err.exception.name, "FAIRQ_ERR_INVALID_CONFIG", kwargs)
            self.assertIn(field, str(err.exception), kwargs)

    def test_defaults_and_true(self):
        self.assertEqual(fairq.StarvationGuard(), (30, 3))
        self.assertEqual(fairq.WaitBoost(), (20000, 64))
        self.assertEqual(fairq.FeedbackController().period_ms, 300000)
        with fairq.Engine(enabled=True, starvation_guard=True, wait_boost=True,
                          feedback=True) as q:
            text = q.metrics()
            self.assertIn("rate_limit_fair_queue_boosted_tenants", text)
            self.assertIn("rate_limit_fair_queue_guard_grants_total", text)


class Tiers(unittest.TestCase):
    def test_tiers_set_weights_and_the_split(self):
        with fairq.Engine(enabled=True, tenant_queue_capacity=1024,
                          tiers={"enterprise": 8, "pro": 3, "free": 1}) as q:
            self.assertEqual(q.tier_weight("PRO"), 3)
            self.assertIsNone(q.tier_weight("gold"))
            q.set_tier("acme", "pro")
            q.set_tier(fairq.tenant_key("globex"), "free")
            self.assertEqual((q.weight_of("acme"), q.weight_of("globex")), (3, 1))
            with self.assertRaises(fairq.FairqError) as err:
                q.set_tier("acme", "gold")
            self.assertEqual(err.exception.status, fairq.ERR_INVALID_ARGUMENT)
            for i in range(400):
                q.enqueue("acme", user_data=i, now_ns=T0)
                q.enqueue("globex", user_data=i, now_ns=T0)
            acme = fairq.tenant_key("acme")
            for window in range(100):
                got = 0
                for _ in range(4):
                    g = q.next_grant(now_ns=T0)
                    got += g.tenant_key == acme
                    q.complete(g.ticket, now_ns=T0)
                self.assertEqual(got, 3, "window %d" % window)
            ind = q.indicators("acme", now_ns=T0)
            self.assertEqual((ind.weight, ind.granted), (3, 300))


class Policies(unittest.TestCase):
    def crowd(self, guard, grants=20000):
        """A weight-1 tenant among 100 weight-8 ones, all backlogged, one grant per ms."""
        with fairq.Engine(enabled=True, tenant_queue_capacity=4, max_wait_ms=86400000,
                          starvation_guard=guard) as q:
            q.enqueue("weak", now_ns=0)
            q.enqueue("weak", now_ns=0)
            for i in range(100):
                q.set_weight("big%d" % i, 8)
                q.enqueue("big%d" % i, now_ns=0)
                q.enqueue("big%d" % i, now_ns=0)
            weak, mine = fairq.tenant_key("weak"), 0
            for i in range(1, grants + 1):
                g = q.next_grant(now_ns=i * MS)
                mine += g.tenant_key == weak
                q.complete(g.ticket, now_ns=i * MS)
                q.enqueue(g.tenant_key, now_ns=i * MS)
            return mine

    def test_starvation_guard_gives_a_share_floor(self):
        without = self.crowd(None)
        with_guard = self.crowd(fairq.StarvationGuard(30, 3))
        self.assertLessEqual(without, 40)  # 1/801 of 20000 is 25
        self.assertGreaterEqual(with_guard, 600)  # 3 %
        self.assertLessEqual(with_guard, 800)

    def test_wait_boost_starts_on_tick_and_ends_when_served(self):
        with fairq.Engine(enabled=True, max_in_flight=1, max_wait_ms=86400000,
                          wait_boost=fairq.WaitBoost(1000, 2)) as q:
            q.enqueue("holder", now_ns=T0)
            held = q.next_grant(now_ns=T0)
            for i in range(3):
                q.enqueue("w%d" % i, now_ns=T0)
            self.assertEqual(q.tick(now_ns=T0 + S // 2).boosts_started, 0)
            report = q.tick(now_ns=T0 + 2 * S)
            self.assertEqual(report, fairq.TickReport(2, False, 0, 0))
            boosted = [q.indicators("w%d" % i, now_ns=T0 + 2 * S).boosted for i in range(3)]
            self.assertEqual(sorted(boosted), [False, True, True])
            q.complete(held.ticket, now_ns=T0 + 2 * S)
            g = q.next_grant(now_ns=T0 + 2 * S)
            self.assertFalse(q.indicators(g.tenant_key, now_ns=T0 + 2 * S).boosted)
            q.complete(g.ticket, now_ns=T0 + 2 * S)

    def test_feedback_nudges_weights(self):
        # a weighs 4, b 2; a guard of 50 % hands b every other grant, against its third by
        # weight: a falls below its share, b above. One step a period, within 50..200 %.
        with fairq.Engine(enabled=True, max_wait_ms=86400000,
                          starvation_guard=fairq.StarvationGuard(1, 50),
                          feedback=fairq.FeedbackController(period_ms=60000)) as q:
            for t, w in (("a", 4), ("b", 2)):
                q.set_weight(t, w)
                q.enqueue(t, now_ns=0)
                q.enqueue(t, now_ns=0)
            history, runs = [], 0
            for step in range(1, 12 * 600 + 1):
                now = step * 100 * MS
                if q.tick(now_ns=now).feedback_ran:
                    runs += 1
                    history.append((q.indicators("a", now_ns=now).effective_weight,
                                    q.indicators("b", now_ns=now).effective_weight))
                g = q.next_grant(now_ns=now)
                q.complete(g.ticket, now_ns=now)
                q.enqueue(g.tenant_key, now_ns=now)
            self.assertIn(runs, (11, 12))
            self.assertEqual(history[0], (5, 1))
            self.assertTrue(all(2 <= x <= 8 and 1 <= y <= 4 for x, y in history), history)
            self.assertEqual(history[-1], (7, 1))
            self.assertEqual(q.indicators("a", now_ns=0).weight, 4)

    def test_indicators_switch(self):
        with fairq.Engine(enabled=True, indicators=False) as q:
            q.enqueue("a", now_ns=T0)
            self.assertIsNone(q.indicators("a", now_ns=T0))
            self.assertNotIn("wait_seconds", q.metrics())
        with self.assertRaises(fairq.FairqError) as err:
            fairq.Engine(enabled=True, indicators=False, wait_boost=True)
        self.assertIn("indicators", str(err.exception))


class Pools(unittest.TestCase):
    def test_a_stuck_pool_leaves_the_other_flowing(self):
        with fairq.Engine(enabled=True, max_in_flight=8, pools=[2, 4]) as q:
            self.assertEqual(q.pools, 2)
            for i in range(4):
                q.enqueue("slow-1", downstream=0, now_ns=T0)
                q.enqueue("slow-2", downstream=0, now_ns=T0)
            held = [q.next_grant(now_ns=T0), q.next_grant(now_ns=T0)]
            self.assertIsNone(q.next_grant(now_ns=T0))  # pool 0 is full
            stats = q.pool_stats(0)
            self.assertEqual((stats.in_flight, stats.blocked_tenants, stats.max_in_flight),
                             (2, 2, 2))
            fast = fairq.tenant_key("fast")
            for i in range(20):
                q.enqueue("fast", downstream=1, now_ns=T0 + i * MS)
                g = q.next_grant(now_ns=T0 + i * MS)
                self.assertEqual(g.tenant_key, fast)
                q.complete(g.ticket, now_ns=T0 + i * MS)
            self.assertIsNone(q.pool_stats(2))
            with self.assertRaises(fairq.FairqError) as err:
                q.enqueue("x", downstream=2)
            self.assertEqual(err.exception.status, fairq.ERR_INVALID_ARGUMENT)
            for g in held:
                q.complete(g.ticket, now_ns=T0 + 30 * MS)
            self.assertEqual(len(drain(q, T0 + 30 * MS)), 6)
            self.assertEqual(q.pool_stats(0).in_flight, 0)
            self.assertIn('rate_limit_fair_queue_downstream_in_flight{tenant_dimension="user",'
                          'downstream="1"} 0', q.metrics())


class LoadShedding(unittest.TestCase):
    def test_a_failing_pool_is_cut_and_refuses_what_it_cannot_serve(self):
        with self.assertRaises(fairq.FairqError) as err:
            fairq.Engine(enabled=True, shedding=True)  # no pools
        self.assertIn("shedding", str(err.exception))
        with self.assertRaises(fairq.FairqError) as err:
            fairq.Engine(enabled=True, pools=[4], shedding=fairq.Shedding(error_percent=101))
        self.assertIn("shedding.error_percent", str(err.exception))
        w = 1000 * MS
        with fairq.Engine(enabled=True, max_in_flight=8, pools=[4, 4],
                          shedding=fairq.Shedding(2, 1000, 10)) as q:
            self.assertEqual(q.pool_shedding(0), (4, False, None, 0, 0, 0))
            self.assertIsNone(q.pool_shedding(2))
            for i in range(20):
                q.report_downstream(0, ok=i % 2 == 0, now_ns=T0 + i)
            q.report_downstream(0, ok=True, now_ns=T0 + w)  # judges the window: 50 % errors
            self.assertEqual(q.pool_shedding(0), (2, True, 0.5, 1, 11, 10))
            self.assertEqual(q.pool_shedding(1).limit, 4)
            with self.assertRaises(fairq.FairqError) as err:
                q.report_downstream(5, ok=True)
            self.assertEqual(err.exception.status, fairq.ERR_INVALID_ARGUMENT)
            now = T0 + w
            for tenant in ("a", "a", "b"):
                q.enqueue(tenant, downstream=0, now_ns=now)
            held = [q.next_grant(now_ns=now), q.next_grant(now_ns=now)]
            self.assertIsNone(q.next_grant(now_ns=now))  # b blocks on the cut pool
            now += 300 * MS
            r = q.enqueue("c", downstream=0, timeout_ns=200 * MS, now_ns=now)
            self.assertEqual((r.queued, r.reason, r.reason_code),
                             (False, "downstream_shedding", fairq.REASON_DOWNSTREAM_SHEDDING))
            self.assertTrue(q.enqueue("c", downstream=1, timeout_ns=200 * MS, now_ns=now).queued)
            self.assertEqual(q.stats()["refused"]["downstream_shedding"], 1)
            self.assertIn('rate_limit_fair_queue_downstream_shedding{tenant_dimension="user",'
                          'downstream="0"} 1', q.metrics())
            for g in held:
                q.complete(g.ticket, now_ns=now)
            drain(q, now)


class Indicators(unittest.TestCase):
    def test_expire_indicators_fairness_and_top_k(self):
        with fairq.Engine(enabled=True, max_in_flight=1, indicator_top_k=2) as q:
            f = q.fairness(now_ns=T0)
            self.assertEqual(f.tenants, 0)
            self.assertIsNone(f.fair_share_ratio_min)
            self.assertIsNone(q.indicators("nobody"))
            for i in range(5):
                for _ in range(i + 1):
                    q.enqueue("k%d" % i, now_ns=T0)
            held = q.next_grant(now_ns=T0)
            victim = q.enqueue("late", user_data=9, now_ns=T0)
            refusal = q.expire(victim.ticket, now_ns=T0 + 5 * MS)
            self.assertEqual((refusal.reason, refusal.position, refusal.waited_ns),
                             ("deadline_exceeded", 1, 5 * MS))
            with self.assertRaises(fairq.FairqError) as err:
                q.expire(victim.ticket, now_ns=T0 + 5 * MS)
            self.assertEqual(err.exception.status, fairq.ERR_STALE_TICKET)
            with self.assertRaises(fairq.FairqError) as err:
                q.expire(held.ticket, now_ns=T0)  # granted: not the caller's to expire
            self.assertEqual(err.exception.status, fairq.ERR_TICKET_STATE)
            ind = q.indicators("late", now_ns=T0 + 5 * MS)
            self.assertEqual((ind.requests, ind.refused, ind.refusal_rate), (1, 1, 1.0))
            q.complete(held.ticket, now_ns=T0 + 5 * MS)
            drain(q, T0 + 10 * MS)
            top = q.fairness_top(now_ns=T0 + 10 * MS)
            self.assertEqual([t.requests for t in top], [5, 4])  # the top 2 only
            self.assertEqual(top[0].tenant_key, fairq.tenant_key("k4"))
            self.assertEqual(len(q.fairness_top(limit=1)), 1)
            self.assertEqual(q.fairness_top(limit=0), [])
            f = q.fairness(now_ns=T0 + 10 * MS)
            self.assertEqual(f.tenants, 6)
            self.assertEqual((f.refusal_rate_min, f.refusal_rate_max), (0.0, 1.0))
            self.assertGreater(f.fair_share_ratio_max, 0)
            self.assertFalse(math.isnan(f.wait_p95_max_s))
            self.assertEqual(q.stats()["refused"]["deadline_exceeded"], 1)


class StatusDump(unittest.TestCase):
    NOW = T0 + 500 * MS

    def flooded(self):
        """300 requests of "flood" queued at T0 with 4 granted (the grants returned), and one of
        "victim" queued 2 ms before NOW."""
        q = fairq.Engine(enabled=True, max_tenants=64, tenant_queue_capacity=512,
                         queue_capacity=4096, max_in_flight=4)
        self.addCleanup(q.close)
        q.set_weight("flood", 1)
        q.set_weight("victim", 1)
        for _ in range(300):
            self.assertTrue(q.enqueue("flood", now_ns=T0).queued)
        held = [q.next_grant(now_ns=T0) for _ in range(4)]
        self.assertTrue(q.enqueue("victim", now_ns=self.NOW - 2 * MS).queued)
        return q, held

    def test_a_flood_shows_its_depth_and_the_victim_its_short_wait(self):
        q, _ = self.flooded()
        s = q.status(k=10, now_ns=self.NOW)
        self.assertEqual((s.enabled, s.in_flight, s.max_in_flight, s.seats_in_flight),
                         (True, 4, 4, None))
        self.assertEqual((s.queued, s.queue_capacity, s.busy_tenants, s.order),
                         (297, 4096, 2, "depth"))
        self.assertEqual(len(s.tenants), 2, s.tenants)
        flood, victim = s.tenants
        self.assertEqual((flood.tenant_key, flood.name, flood.tier),
                         (fairq.tenant_key("flood"), "flood", None))
        self.assertEqual((flood.queued, flood.in_flight, flood.granted), (296, 4, 4))
        self.assertEqual(flood.oldest_wait_ns, 500 * MS, "queued at T0")
        self.assertEqual((flood.state, flood.light, flood.parked_for_ns),
                         ("backlogged", False, None))
        self.assertEqual((victim.name, victim.queued, victim.in_flight), ("victim", 1, 0))
        self.assertEqual(victim.oldest_wait_ns, 2 * MS)
        self.assertEqual((victim.state, victim.light), ("light", True))
        # By oldest wait the flood's head comes first too; cut to one row, the count is not.
        s = q.status(k=1, order="oldest_wait", now_ns=self.NOW)
        self.assertEqual(([t.name for t in s.tenants], s.order, s.busy_tenants),
                         (["flood"], "oldest_wait", 2))
        self.assertEqual(q.status(k=0, now_ns=self.NOW).tenants, [])

    def test_after_the_flood_drains_the_rows_go(self):
        q, held = self.flooded()
        for g in held:
            q.complete(g.ticket, now_ns=self.NOW)
        held = []
        while (g := q.next_grant(now_ns=self.NOW)) is not None:
            self.assertFalse(g.expired)
            held.append(g)
            if len(held) == 4:
                for g in held:
                    q.complete(g.ticket, now_ns=self.NOW)
                held = []
        self.assertEqual(len(held), 1, "297 requests, 4 at a time")
        s = q.status(now_ns=self.NOW)
        self.assertEqual([(t.tenant_key, t.queued, t.in_flight, t.state) for t in s.tenants],
                         [(held[0].tenant_key, 0, 1, "idle")], "a grant out keeps its row")
        q.complete(held[0].ticket, now_ns=self.NOW)
        s = q.status(now_ns=self.NOW)
        self.assertEqual(s.tenants, [])
        self.assertEqual((s.busy_tenants, s.queued, s.in_flight), (0, 0, 0))

    def test_json_agrees_with_status_and_text_is_a_table(self):
        q, _ = self.flooded()
        s = q.status(k=10, now_ns=self.NOW)
        j = json.loads(q.status_text(k=10, format="json", now_ns=self.NOW))
        for field in ("enabled", "in_flight", "seats_in_flight", "max_in_flight", "queued",
                      "queue_capacity", "busy_tenants", "weight_classes", "order"):
            self.assertEqual(j[field], getattr(s, field), field)
        self.assertEqual(j["pools"], [])
        self.assertEqual(len(j["tenants"]), len(s.tenants))
        for row, t in zip(j["tenants"], s.tenants):
            self.assertEqual(int(row["tenant"], 16), t.tenant_key)
            for field in ("name", "tier", "weight", "effective_weight", "queued", "in_flight",
                          "granted", "oldest_wait_ns", "state", "parked_for_ns"):
                self.assertEqual(row[field], getattr(t, field), field)
        j = json.loads(q.status_text(k=1, order="oldest_wait", now_ns=self.NOW))
        self.assertEqual((j["order"], [t["name"] for t in j["tenants"]]),
                         ("oldest_wait", ["flood"]))
        text = q.status_text(format="text", now_ns=self.NOW)
        lines = text.splitlines()
        self.assertEqual(len(lines), 4, text)  # totals, heading, two tenants
        self.assertIn("queued 297/4096", lines[0])
        self.assertTrue(lines[2].startswith("%016x" % fairq.tenant_key("flood")), text)
        self.assertIn("backlogged", lines[2])
        self.assertIn("victim", lines[3])
        # Wider than any first guess: 60 tenants of 4 requests each.
        for i in range(60):
            for _ in range(4):
                q.enqueue("tenant-%02d" % i, now_ns=self.NOW)
        j = json.loads(q.status_text(k=100, now_ns=self.NOW))
        self.assertEqual(len(j["tenants"]), 62)
        self.assertEqual(j["tenants"][0]["name"], "flood")

    def test_unknown_order_or_format_and_a_closed_engine_raise(self):
        q, _ = self.flooded()
        for call in (lambda: q.status(order="deepest"),
                     lambda: q.status(order=7),
                     lambda: q.status_text(order="deepest"),
                     lambda: q.status_text(format="yaml"),
                     lambda: q.status_text(format=9)):
            with self.assertRaises(fairq.FairqError) as err:
                call()
            self.assertEqual(err.exception.status, fairq.ERR_INVALID_ARGUMENT)
        self.assertEqual(q.status(order=fairq.STATUS_BY_OLDEST_WAIT).order, "oldest_wait")
        q.close()
        for call in (q.status, q.status_text):
            with self.assertRaises(fairq.FairqError) as err:
                call()
            self.assertEqual(err.exception.status, fairq.ERR_NULL)

    def test_names_only_for_raw_identifiers_tiers_and_parking(self):
        with fairq.Engine(enabled=True, tiers={"gold": 8}) as q:
            q.set_weight(fairq.tenant_key("keyed"), 2)
            q.set_weight(b"bytes-id", 3)
            q.set_tier("acme", "gold")
            q.set_tier(fairq.tenant_key("keyed-gold"), "gold")
            self.assertEqual(q.weight_of("bytes-id"), 3, "a raw id names the same key")
            for name in ("keyed", "bytes-id", "acme", "keyed-gold"):
                q.enqueue(name, now_ns=T0)
            q.enqueue("acme", retry_after_ns=50 * MS, now_ns=T0)
            rows = {t.tenant_key: t for t in q.status(now_ns=T0 + 10 * MS).tenants}
            row = lambda name: rows[fairq.tenant_key(name)]
            self.assertEqual((row("keyed").name, row("keyed").weight), (None, 2))
            self.assertEqual((row("bytes-id").name, row("bytes-id").weight), ("bytes-id", 3))
            self.assertEqual((row("acme").name, row("acme").tier, row("acme").weight),
                             ("acme", "gold", 8))
            self.assertEqual((row("keyed-gold").name, row("keyed-gold").tier), (None, "gold"))
            # The first grant takes acme's ready head; its parked request is the head after.
            granted = set()
            while (g := q.next_grant(now_ns=T0 + 10 * MS)) is not None:
                granted.add(g.tenant_key)
            self.assertEqual(len(granted), 4)
            acme = [t for t in q.status(now_ns=T0 + 20 * MS).tenants
                    if t.tenant_key == fairq.tenant_key("acme")][0]
            self.assertEqual(acme.state, "parked")
            self.assertEqual(acme.parked_for_ns, 30 * MS, "its Retry-After ends at T0 + 50 ms")


# ---------------------------------------------------------------------------- fleet mode


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Seats(unittest.TestCase):
    def test_max_in_flight_counts_cost_units(self):
        with fairq.Engine(enabled=True, max_in_flight=4, seats=True) as q:
            for _ in range(3):
                q.enqueue("a", cost=2, now_ns=T0)
            first, second = q.next_grant(now_ns=T0), q.next_grant(now_ns=T0)
            self.assertEqual((first.cost, second.cost), (2, 2))
            self.assertIsNone(q.next_grant(now_ns=T0), "4 seats out: at capacity")
            self.assertEqual(q.stats()["in_flight"], 2, "two grants hold the 4 seats")
            q.complete(first.ticket, now_ns=T0)
            self.assertIsNotNone(q.next_grant(now_ns=T0))
        # Off (the default): a grant takes one permit whatever its cost.
        with fairq.Engine(enabled=True, max_in_flight=4) as q:
            for _ in range(4):
                q.enqueue("a", cost=2, now_ns=T0)
            self.assertTrue(all(q.next_grant(now_ns=T0) is not None for _ in range(4)))


class LightLane(unittest.TestCase):
    def served_first(self, **lane):
        """Whether a tenant that comes back below its share is granted before a backlogged one."""
        with fairq.Engine(enabled=True, max_in_flight=1, **lane) as q:
            q.set_weight("noisy", 8)
            for _ in range(8):
                q.enqueue("noisy", now_ns=T0)
            for _ in range(20):
                g = q.next_grant(now_ns=T0)
                q.complete(g.ticket, now_ns=T0)
                q.enqueue("noisy", now_ns=T0)
            q.enqueue("light", user_data=7, now_ns=T0)
            return q.next_grant(now_ns=T0).user_data == 7

    def test_a_returning_tenant_is_granted_next_unless_the_lane_is_off(self):
        self.assertTrue(self.served_first(), "on by default")
        self.assertTrue(self.served_first(light_lane=True))
        self.assertFalse(self.served_first(light_lane=False))


class RedisServer:
    """A redis-server on a free port, no persistence; a minimal RESP client for checks."""

    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="fairq-redis-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.cmd("PING") == "PONG":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    @property
    def url(self):
        return "redis://127.0.0.1:%d/" % self.port

    def cmd(self, *args):
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            data = b"*%d\r\n" % len(args) + b"".join(
                b"$%d\r\n%s\r\n" % (len(a), a) for a in (str(x).encode() for x in args))
            sock.sendall(data)
            return self._read(sock.makefile("rb"))

    def _read(self, f):
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2].decode()
        if kind == b"*":
            return [self._read(f) for _ in range(int(rest))]
        raise RuntimeError("unexpected reply %r" % line)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def served_engine():
    """An engine where tenant "acme" was served once, so a fleet has a tenant to track."""
    q = fairq.Engine(enabled=True)
    q.enqueue("acme")
    q.complete(q.next_grant().ticket)
    return q


@unittest.skipUnless(fairq.HAS_FLEET, "library built without fleet mode (cargo build -p fairq "
                     "--features fleet, then FAIRQ_LIB=.../libfairq.so)")
@unittest.skipUnless(shutil.which("redis-server"), "redis-server not on PATH")
class FleetMode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = RedisServer()

    @classmethod
    def tearDownClass(cls):
        cls.redis.stop()

    def test_config_errors_name_the_field(self):
        self.assertEqual(fairq.FleetConfig.default().period_ms, 100)
        with served_engine() as q:
            with self.assertRaises(fairq.FairqError) as err:
                fairq.Fleet(q, url=self.redis.url, period_ms=20)
            self.assertEqual(err.exception.name, "FAIRQ_ERR_INVALID_CONFIG")
            self.assertIn("period_ms", str(err.exception))
            with self.assertRaises(fairq.FairqError) as err:
                fairq.Fleet(q, url="http://127.0.0.1/")
            self.assertEqual(err.exception.name, "FAIRQ_ERR_INVALID_CONFIG")
            with self.assertRaises(TypeError):
                fairq.Fleet(q, colour="blue")

    def test_sync_against_a_live_redis(self):
        with served_engine() as q, fairq.Fleet(q, url=self.redis.url, fleet="py-test",
                                              replica="py-1", period_ms=50) as f:
            st = f.status()
            self.assertFalse(st.has_synced or st.running)
            self.assertEqual((st.syncs, st.pipelines), (0, 0))
            f.sync()
            st = f.status()
            self.assertTrue(st.has_synced and not st.degraded)
            self.assertEqual((st.syncs, st.pipelines, st.tenants_tracked), (1, 1, 1))
            f.sync(now_ns=st.last_sync_ns + 100 * MS)
            self.assertEqual(f.status().last_sync_ns, st.last_sync_ns + 100 * MS)
            keys = self.redis.cmd("KEYS", "{fairq:py-test}:served:*")
            self.assertTrue(keys, "no fleet hash written")
            fields = self.redis.cmd("HGETALL", keys[0])
            self.assertIn("hb:py-1", fields[0::2], fields)

    def test_dead_redis_fails_and_degrades_after_three(self):
        dead = "redis://127.0.0.1:%d/" % free_port()
        with served_engine() as q, fairq.Fleet(q, url=dead, fleet="py-dead",
                                              replica="py-1", period_ms=50) as f:
            now = fairq.now_ns()
            for i in range(1, 5):
                with self.assertRaises(fairq.FairqError) as err:
                    f.sync(now_ns=now + i * 50 * MS)
                self.assertEqual(err.exception.status, fairq.ERR_FLEET_SYNC)
                st = f.status()
                self.assertEqual((st.consecutive_failures, st.syncs), (i, i))
                self.assertEqual(st.degraded, i >= 3)
            # Grants never wait for Redis: the engine serves as before.
            q.enqueue("acme")
            q.complete(q.next_grant().ticket)

    def test_start_stop_and_busy(self):
        with served_engine() as q, fairq.Fleet(q, url=self.redis.url, fleet="py-thread",
                                              replica="py-1", period_ms=50) as f:
            self.assertFalse(f.stop())
            f.start()
            self.assertTrue(f.status().running)
            with self.assertRaises(fairq.FairqError) as err:
                f.start()
            self.assertEqual(err.exception.status, fairq.ERR_BUSY)
            with self.assertRaises(fairq.FairqError) as err:
                f.sync()
            self.assertEqual(err.exception.status, fairq.ERR_BUSY)
            deadline = time.monotonic() + 5
            while f.status().syncs < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertTrue(f.stop())
            st = f.status()
            self.assertTrue(st.syncs >= 3 and st.has_synced and not st.running)
            self.assertEqual(st.pipelines, st.syncs)
            f.sync()
            f.start()  # close() stops it


if __name__ == "__main__":
    unittest.main()
