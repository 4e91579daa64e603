//! Model 6: the ticket free stack (a Treiber stack with a tagged head, `ticket.rs`).
//!
//! One thread cancels a queued ticket (its cell goes back on the stack) and enqueues again (pops
//! a cell) while another enqueues and cancels its own: pushes and pops race on the head. Then
//! every cell of the slab must still be allocatable exactly once: filling the engine to its
//! bounds gives `ticket_capacity` live tickets on distinct cells, so no cell was lost or handed
//! out twice.
#![cfg(loom)]

use std::collections::HashSet;

use fairq::{Engine, NextGrant, Ticket};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tenant_b, tiny_config};
use loom::sync::Arc;
use loom::thread;

fn push_pop_model() {
    let config = tiny_config();
    let engine = Arc::new(Engine::new(config.clone()).unwrap());
    let first = enqueue(&engine, &request(tenant_a()), 0);

    let other = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            let mine = enqueue(&engine, &request(tenant_b()), 1);
            engine.cancel_at(mine, 1).unwrap();
        })
    };
    engine.cancel_at(first, 1).unwrap();
    let again = enqueue(&engine, &request(tenant_a()), 1);
    other.join().unwrap();

    // Fill every bound: one granted (max_in_flight 1), then the queue (queue_capacity 4).
    let mut live: Vec<Ticket> = vec![again];
    let NextGrant::Granted(grant) = engine.next_grant_at(2) else {
        panic!("A's request is ready: {:?}", engine.stats());
    };
    assert_eq!(grant.ticket, again);
    for key in [tenant_a(), tenant_a(), tenant_b(), tenant_b()] {
        live.push(enqueue(&engine, &request(key), 2));
    }
    assert_eq!(
        live.len(),
        config.queue_capacity as usize + config.max_in_flight as usize
    );
    // The handle's low 32 bits are its cell (`Ticket` docs).
    let cells: HashSet<u32> = live.iter().map(|t| t.0 as u32).collect();
    assert_eq!(
        cells.len(),
        live.len(),
        "one cell handed out twice: {live:?}"
    );
}

#[test]
fn free_stack_push_races_pop() {
    check("free_list::push_vs_pop", push_pop_model);
}

/// The stack pops by load and store: two allocations can take the same cell.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "a popped ticket cell is not free")]
fn broken_free_list_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::FreeList, || {
        check("free_list::push_vs_pop [broken]", push_pop_model)
    });
}
