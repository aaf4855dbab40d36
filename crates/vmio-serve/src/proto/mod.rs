//! The NBD wire format, as pure encode/decode functions on byte buffers (no I/O), so that
//! the parsers can be fuzzed.
//!
//! Source: the NBD protocol specification, `doc/proto.md` of the NetworkBlockDevice/nbd
//! repository ("Fixed newstyle negotiation", "Transmission", "Values"). vmio implements:
//!
//! - the fixed newstyle handshake with `NBD_FLAG_FIXED_NEWSTYLE` and `NBD_FLAG_NO_ZEROES`
//!   ([`handshake`]);
//! - options `NBD_OPT_EXPORT_NAME`, `NBD_OPT_ABORT`, `NBD_OPT_LIST`, `NBD_OPT_INFO`,
//!   `NBD_OPT_GO` (with `NBD_INFO_EXPORT`, `NBD_INFO_NAME`, `NBD_INFO_BLOCK_SIZE`); every other
//!   option gets `NBD_REP_ERR_UNSUP` (structured replies are not negotiated, so every reply is
//!   a simple reply);
//! - commands `NBD_CMD_READ`, `WRITE`, `DISC`, `FLUSH`, `TRIM`, `WRITE_ZEROES` with
//!   `NBD_CMD_FLAG_FUA` and `NBD_CMD_FLAG_NO_HOLE` ([`transmission`]).
//!
//! A malformed handshake or request header ([`ProtoError`]) ends the connection; a well-formed
//! request the export cannot serve gets an NBD error value in its reply.

pub mod handshake;
pub mod transmission;

use thiserror::Error;

/// `NBDMAGIC`, sent first by the server.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle magic, and the magic of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// Magic of option replies.
pub const REPLY_MAGIC: u64 = 0x3_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;

// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;

// Information types of NBD_OPT_INFO / NBD_OPT_GO.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands and command flags.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

// Error values of replies.
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// Largest READ/WRITE payload served: 2^25 bytes, the size the specification says every
/// server should accept ("Size constraints"); advertised in `NBD_INFO_BLOCK_SIZE`.
pub const MAX_PAYLOAD_BYTES: u32 = 1 << 25;
/// Largest option data accepted during the handshake; longer options end the connection
/// (export names are at most 4096 bytes by the specification).
pub const MAX_OPTION_BYTES: u32 = 16 << 10;

/// A byte stream that does not follow the protocol: the connection is closed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProtoError {
    #[error("bad magic {found:#x} in {what} (expected {expected:#x})")]
    BadMagic {
        what: &'static str,
        found: u64,
        expected: u64,
    },
    #[error("client flags {0:#x} include unknown or unadvertised bits (accepted: FIXED_NEWSTYLE, NO_ZEROES)")]
    ClientFlags(u32),
    #[error("option {option} carries {len} bytes of data, more than the {max} accepted")]
    OptionTooLong { option: u32, len: u32, max: u32 },
    #[error("client did not set NBD_FLAG_C_FIXED_NEWSTYLE and sent option {0} other than NBD_OPT_EXPORT_NAME")]
    NotFixedNewstyle(u32),
    #[error("unknown export '{0}' requested with NBD_OPT_EXPORT_NAME")]
    UnknownExport(String),
    #[error("write of {len} bytes exceeds the largest payload ({max} bytes)")]
    PayloadTooLarge { len: u32, max: u32 },
}

// Big-endian fields at `at`; callers check lengths first (the proptests of the parsers
// cover them), and a short buffer reads as 0 rather than panicking.
pub(crate) fn be_u16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |s| u16::from_be_bytes([s[0], s[1]]))
}
pub(crate) fn be_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}
pub(crate) fn be_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| {
        u64::from_be_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
    })
}
