//! Transmission phase (proto.md, "Request message", "Simple reply message", "Request
//! types", "Error values").
//!
//! ```text
//! C: u32 0x25609513  u16 flags  u16 type  u64 cookie  u64 offset  u32 length  [data if WRITE]
//! S: u32 0x67446698  u32 error  u64 cookie  [data if READ and error == 0]
//! ```
//!
//! [`check_request`] decides, without touching storage, whether a well-formed request can be
//! served and which error value it gets otherwise: unknown commands and flags get
//! `NBD_EINVAL`; reads and trims past the end `NBD_EINVAL`; writes past the end `NBD_ENOSPC`;
//! READ/WRITE payloads above [`MAX_PAYLOAD_BYTES`] `NBD_EINVAL`. A WRITE's payload always
//! follows its header and must be consumed even when the request is refused.

use super::*;

pub const REQUEST_BYTES: usize = 28;
pub const REPLY_BYTES: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub cmd: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

impl RequestHeader {
    /// Bytes of payload that follow the header on the wire.
    pub fn payload_bytes(&self) -> u32 {
        if self.cmd == CMD_WRITE {
            self.len
        } else {
            0
        }
    }

    pub fn encode(&self) -> [u8; REQUEST_BYTES] {
        let mut b = [0u8; REQUEST_BYTES];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.cmd.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

/// Decode a request header; a bad magic ends the connection.
pub fn parse_request(b: &[u8; REQUEST_BYTES]) -> Result<RequestHeader, ProtoError> {
    let magic = be_u32(b, 0);
    if magic != REQUEST_MAGIC {
        return Err(ProtoError::BadMagic {
            what: "request",
            found: magic as u64,
            expected: REQUEST_MAGIC as u64,
        });
    }
    Ok(RequestHeader {
        flags: be_u16(b, 4),
        cmd: be_u16(b, 6),
        cookie: be_u64(b, 8),
        offset: be_u64(b, 16),
        len: be_u32(b, 24),
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Read,
    Write,
    Disc,
    Flush,
    Trim,
    WriteZeroes { no_hole: bool },
}

/// A request the export will execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    pub command: Command,
    pub fua: bool,
}

/// Decide a request against an export of `export_bytes`: what to execute, or the NBD error
/// value to reply with.
pub fn check_request(h: &RequestHeader, export_bytes: u64) -> Result<Checked, u32> {
    let command = match h.cmd {
        CMD_READ => Command::Read,
        CMD_WRITE => Command::Write,
        CMD_DISC => Command::Disc,
        CMD_FLUSH => Command::Flush,
        CMD_TRIM => Command::Trim,
        CMD_WRITE_ZEROES => Command::WriteZeroes {
            no_hole: h.flags & CMD_FLAG_NO_HOLE != 0,
        },
        _ => return Err(EINVAL),
    };
    let allowed = match command {
        Command::WriteZeroes { .. } => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        _ => CMD_FLAG_FUA,
    };
    if h.flags & !allowed != 0 {
        return Err(EINVAL);
    }
    let fua = h.flags & CMD_FLAG_FUA != 0;
    if matches!(command, Command::Read | Command::Write) && h.len > MAX_PAYLOAD_BYTES {
        return Err(EINVAL);
    }
    if matches!(
        command,
        Command::Read | Command::Write | Command::Trim | Command::WriteZeroes { .. }
    ) && h
        .offset
        .checked_add(h.len as u64)
        .is_none_or(|end| end > export_bytes)
    {
        return Err(match command {
            Command::Write | Command::WriteZeroes { .. } => ENOSPC,
            _ => EINVAL,
        });
    }
    Ok(Checked { command, fua })
}

/// A simple reply's 16 bytes.
pub fn simple_reply(error: u32, cookie: u64) -> [u8; REPLY_BYTES] {
    let mut b = [0u8; REPLY_BYTES];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(cmd: u16, flags: u16, offset: u64, len: u32) -> RequestHeader {
        RequestHeader {
            flags,
            cmd,
            cookie: 7,
            offset,
            len,
        }
    }

    #[test]
    fn requests_round_trip_through_the_wire_format() {
        let r = req(CMD_WRITE, CMD_FLAG_FUA, 4096, 512);
        assert_eq!(parse_request(&r.encode()), Ok(r));
        assert_eq!(r.payload_bytes(), 512);
        assert_eq!(req(CMD_READ, 0, 0, 512).payload_bytes(), 0);
    }

    #[test]
    fn a_bad_request_magic_ends_the_connection() {
        let mut b = req(CMD_READ, 0, 0, 1).encode();
        b[0] ^= 1;
        assert!(matches!(
            parse_request(&b),
            Err(ProtoError::BadMagic { .. })
        ));
    }

    #[test]
    fn out_of_range_requests_get_the_errors_the_specification_names() {
        let size = 1 << 20;
        assert_eq!(check_request(&req(CMD_READ, 0, size, 1), size), Err(EINVAL));
        assert_eq!(
            check_request(&req(CMD_WRITE, 0, size - 1, 2), size),
            Err(ENOSPC)
        );
        assert_eq!(
            check_request(&req(CMD_TRIM, 0, u64::MAX, 2), size),
            Err(EINVAL)
        );
        assert_eq!(
            check_request(&req(CMD_WRITE_ZEROES, 0, size, 4096), size),
            Err(ENOSPC)
        );
        assert!(check_request(&req(CMD_READ, 0, size - 4096, 4096), size).is_ok());
    }

    #[test]
    fn unknown_commands_flags_and_oversized_payloads_are_invalid() {
        let size = 1 << 40;
        assert_eq!(check_request(&req(9, 0, 0, 0), size), Err(EINVAL));
        assert_eq!(
            check_request(&req(CMD_READ, 1 << 7, 0, 1), size),
            Err(EINVAL)
        );
        assert_eq!(
            check_request(&req(CMD_WRITE, CMD_FLAG_NO_HOLE, 0, 1), size),
            Err(EINVAL)
        );
        assert_eq!(
            check_request(&req(CMD_READ, 0, 0, MAX_PAYLOAD_BYTES + 1), size),
            Err(EINVAL)
        );
        let c = check_request(&req(CMD_WRITE_ZEROES, 3, 0, u32::MAX), size).unwrap();
        assert_eq!(c.command, Command::WriteZeroes { no_hole: true });
        assert!(c.fua);
    }

    #[test]
    fn simple_replies_carry_magic_error_and_cookie() {
        let b = simple_reply(EINVAL, 0xfeed);
        assert_eq!(be_u32(&b, 0), SIMPLE_REPLY_MAGIC);
        assert_eq!(be_u32(&b, 4), 22);
        assert_eq!(be_u64(&b, 8), 0xfeed);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn every_request_header_round_trips_through_the_wire_format(
            flags in any::<u16>(), cmd in any::<u16>(), cookie in any::<u64>(),
            offset in any::<u64>(), len in any::<u32>()
        ) {
            let h = RequestHeader { flags, cmd, cookie, offset, len };
            prop_assert_eq!(parse_request(&h.encode()), Ok(h));
        }

        #[test]
        fn arbitrary_bytes_parse_as_a_request_only_with_the_magic(
            b in proptest::array::uniform28(any::<u8>())
        ) {
            let magic_ok = b[0..4] == REQUEST_MAGIC.to_be_bytes();
            prop_assert_eq!(parse_request(&b).is_ok(), magic_ok);
            if let Ok(h) = parse_request(&b) {
                prop_assert_eq!(h.encode(), b);
            }
        }

        #[test]
        fn the_request_parser_and_checker_never_panic(
            b in proptest::collection::vec(any::<u8>(), REQUEST_BYTES), size in any::<u64>()
        ) {
            let b: [u8; REQUEST_BYTES] = b.try_into().unwrap();
            if let Ok(h) = parse_request(&b) {
                if let Ok(c) = check_request(&h, size) {
                    if c.command != Command::Flush && c.command != Command::Disc {
                        prop_assert!(h.offset + h.len as u64 <= size);
                    }
                }
            }
        }

        #[test]
        fn checked_reads_and_writes_fit_the_payload_cap(
            cmd in 0u16..8, flags in 0u16..4, offset in any::<u64>(), len in any::<u32>()
        ) {
            let h = req(cmd, flags, offset, len);
            if let Ok(c) = check_request(&h, u64::MAX) {
                if matches!(c.command, Command::Read | Command::Write) {
                    prop_assert!(len <= MAX_PAYLOAD_BYTES);
                }
            }
        }
    }
}
