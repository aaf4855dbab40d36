//! A slab of reusable slots: the simulator's in-flight requests and barriers live in slabs so
//! that the hot path reuses memory instead of allocating per request, and an index (carried in
//! an event or a device tag) stays valid until its slot is freed. It is the core crate's
//! [`vmio_core::slab::Slab`], the one the device queues keep their in-flight requests in.

pub(super) use vmio_core::slab::Slab;
