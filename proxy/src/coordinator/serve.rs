//! The owner's side of the mesh: every request another core sends is
//! executed here (a batch, a closure, a task, a blocking pop) and answered
//! once what it wrote is durable.

use super::locks::until;
use super::unit::{locked_here, release_here, wait_for_release};
use crate::core::Core;
use crate::mesh::{Batch, BatchReply, Envelope, Request, Response, NO_TICKET};
use crate::persistence::aof::durable::durable;
use glommio::channels::channel_mesh::Receivers;
use std::rc::Rc;

/// Serves requests from every peer: execute, send the reply back; and
/// drains the peers' replies to this core's requests.
pub fn serve(
    core: &Rc<Core>,
    mut requests: Receivers<Envelope<Request<Core>>>,
    responses: Receivers<Envelope<Response>>,
) {
    for (peer, rx) in requests.streams() {
        let core = core.clone();
        glommio::spawn_local(async move {
            while let Some(env) = rx.recv().await {
                let body = match env.body {
                    Request::Batch(batch) => {
                        let mut reply = BatchReply::for_batch(&batch);
                        let locked = match (batch.lock.as_deref(), batch.unit) {
                            (Some((keys, whole)), Some(unit)) => {
                                let locked = core.locks.borrow_mut().try_lock(unit, keys, *whole);
                                if locked {
                                    locked_here(&core, unit, keys, *whole);
                                }
                                locked
                            }
                            _ => true,
                        };
                        if !locked || !core.execute_batch(&batch, &mut reply) {
                            // Held by a unit: finish once it lets go, while
                            // this channel keeps draining (the release may be
                            // behind us on it).
                            let (me, ticket) = (core.clone(), env.ticket);
                            glommio::spawn_local(async move {
                                if let (false, Some((keys, whole)), Some(unit)) =
                                    (locked, batch.lock.as_deref(), batch.unit)
                                {
                                    until(&me.locks, |t| !t.try_lock(unit, keys, *whole)).await;
                                    locked_here(&me, unit, keys, *whole);
                                }
                                while !me.execute_batch(&batch, &mut reply) {
                                    wait_for_release(&me).await;
                                }
                                reply.rest = rest_of(batch, &reply);
                                durable(&me).await;
                                me.deliver(peer, ticket, Response::Batch(reply));
                            })
                            .detach();
                            continue;
                        }
                        reply.rest = rest_of(batch, &reply);
                        Response::Batch(reply)
                    }
                    Request::Call(f) => {
                        let r = Response::Call(f(&core));
                        core.serve_ready();
                        if env.ticket == NO_TICKET {
                            // Nobody awaits it: no reply. The sender may be
                            // blocked in `call_blocking` (a script holding
                            // every shard), not draining its replies: more
                            // than a channel's worth of them would stop this
                            // loop, and the script's next call with it.
                            continue;
                        }
                        r
                    }
                    Request::Task(f) => {
                        let (fut, me, ticket) = (f(core.clone()), core.clone(), env.ticket);
                        glommio::spawn_local(async move {
                            let r = fut.await;
                            me.deliver(peer, ticket, Response::Call(r));
                        })
                        .detach();
                        continue;
                    }
                    Request::Block(req) => match core.block(*req) {
                        Some(r) => r,
                        None => continue,
                    },
                    Request::Unblock(id) => {
                        core.unblock(id);
                        continue;
                    }
                    Request::Release(unit, touch, shards) => {
                        release_here(&core, unit, touch, shards);
                        continue;
                    }
                };
                // appendfsync always: what this request wrote is on disk
                // before its reply leaves.
                durable(&core).await;
                if !core.mesh.respond(peer, env.ticket, body).await {
                    break;
                }
            }
        })
        .detach();
    }
    core.mesh.receive_responses(responses);
}

/// The batch, sent back to be resent from where its owner stopped, when
/// `REPLY_CAP` cut it short.
fn rest_of(mut batch: Batch, reply: &BatchReply) -> Option<Batch> {
    let next = reply.next_op();
    (next < batch.ops.len()).then(|| {
        batch.first = next as u32;
        batch.lock = None;
        batch
    })
}
