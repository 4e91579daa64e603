"""fairq quick start: two tenants weighted 3:1 share a gateway's admission capacity.

The cycle of ffi/c/quickstart.c, from Python: after `pip install ./ffi/python`,
`python3 quickstart.py` (the C library found as fairq.py's docstring says).
"""

import fairq

with fairq.Engine(enabled=True, max_in_flight=4) as q:  # off by default: enabled=True
    q.set_weight("acme", 3)
    q.set_weight("globex", 1)

    # The limiter refused 8 requests of each tenant: hold them instead of answering 429.
    for i in range(16):
        r = q.enqueue("globex" if i % 2 else "acme", user_data=i)
        if not r.queued:
            print(f"refused {i}: {r.reason}")  # answer 429 with the reason and position

    # Whenever capacity frees up: take grants until EMPTY or AT_CAPACITY (None).
    grants = {"acme": 0, "globex": 0}
    acme = fairq.tenant_key("acme")
    while (g := q.next_grant()) is not None:
        if g.expired:
            continue  # answer 429: deadline_exceeded
        name = "acme" if g.tenant_key == acme else "globex"
        grants[name] += 1
        if sum(grants.values()) <= 8:
            first8 = dict(grants)
            print(f"grant {sum(grants.values())}: request {g.user_data} of {name}")
        q.complete(g.ticket)  # re-check the limiter; it passes, so the request is admitted
    # While both tenants wait, grants follow the weights; then the rest drains.
    print(f"first 8 grants, both waiting: acme {first8['acme']}, globex {first8['globex']} "
          "(weights 3:1)")
    print(f"all granted: acme {grants['acme']}, globex {grants['globex']}")

    s = q.stats()
    print(f"enqueued {s['enqueued']}, granted {s['granted']}, completed {s['completed']}, "
          f"queued {s['queued']}")
    print(f"library {fairq.library_path}, version {fairq.version()}")
