//! Sensor protocols carried in the packets a queue receives or sends. A leaf: decoders and
//! encoders work on byte slices, so they serve every engine (sockets hand over datagrams,
//! the raw engines frames whose UDP payload the caller passes on).
//!
//! - [`spead`]: SPEAD (the Streaming Protocol for Exchanging Astronomical Data) as spead2
//!   speaks it: packets of the 64-40 and 64-48 flavours, heaps cut into packets for
//!   sending, and heaps assembled into chunks by a placement rule, the way spead2's chunk
//!   stream does.
//! - [`iq`]: IQ samples out of VITA-49 signal data packets and O-RAN U-plane messages in
//!   eCPRI (uncompressed or block floating point), as complex `f32` or `f16`.

pub mod iq;
pub mod spead;
