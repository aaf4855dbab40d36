//! Fixed newstyle negotiation (proto.md, "Newstyle negotiation", "Fixed newstyle
//! negotiation", "Option types", "Option reply types").
//!
//! ```text
//! S: NBDMAGIC IHAVEOPT u16 handshake-flags        C: u32 client-flags
//! repeat: C: IHAVEOPT u32 option u32 len data[len]
//!         S: REPLY_MAGIC u32 option u32 type u32 len data   (all options but EXPORT_NAME)
//! until:  EXPORT_NAME (S: u64 size, u16 flags, 124 zeroes unless NO_ZEROES) or GO + ACK
//! ```

use super::*;

/// The server's first 18 bytes.
pub fn greeting() -> [u8; 18] {
    let mut b = [0u8; 18];
    b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientFlags {
    pub fixed_newstyle: bool,
    pub no_zeroes: bool,
}

/// The client's flags; unknown bits end the session, as the specification requires.
pub fn parse_client_flags(b: [u8; 4]) -> Result<ClientFlags, ProtoError> {
    let f = u32::from_be_bytes(b);
    if f & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(ProtoError::ClientFlags(f));
    }
    Ok(ClientFlags {
        fixed_newstyle: f & FLAG_C_FIXED_NEWSTYLE != 0,
        no_zeroes: f & FLAG_C_NO_ZEROES != 0,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub len: u32,
}

/// The 16-byte header of a client option: magic, option, data length.
pub fn parse_option_header(b: &[u8; 16]) -> Result<OptionHeader, ProtoError> {
    let magic = be_u64(b, 0);
    if magic != IHAVEOPT {
        return Err(ProtoError::BadMagic {
            what: "option header",
            found: magic,
            expected: IHAVEOPT,
        });
    }
    let h = OptionHeader {
        option: be_u32(b, 8),
        len: be_u32(b, 12),
    };
    if h.len > MAX_OPTION_BYTES {
        return Err(ProtoError::OptionTooLong {
            option: h.option,
            len: h.len,
            max: MAX_OPTION_BYTES,
        });
    }
    Ok(h)
}

/// Export name and information requests of `NBD_OPT_INFO` / `NBD_OPT_GO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub requests: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientOption {
    ExportName(String),
    Abort,
    List,
    Info(InfoRequest),
    Go(InfoRequest),
    /// Any other option: answered with `NBD_REP_ERR_UNSUP`.
    Unsupported(u32),
}

/// Decode an option's data. `Err(reason)` means a malformed option, answered with
/// `NBD_REP_ERR_INVALID` (the session goes on).
pub fn parse_option(option: u32, data: &[u8]) -> Result<ClientOption, String> {
    let name = |b: &[u8]| {
        String::from_utf8(b.to_vec()).map_err(|_| "export name is not UTF-8".to_string())
    };
    match option {
        OPT_EXPORT_NAME => Ok(ClientOption::ExportName(
            String::from_utf8_lossy(data).into_owned(),
        )),
        OPT_ABORT => Ok(ClientOption::Abort),
        OPT_LIST if data.is_empty() => Ok(ClientOption::List),
        OPT_LIST => Err("NBD_OPT_LIST takes no data".into()),
        OPT_INFO | OPT_GO => {
            if data.len() < 6 {
                return Err(format!("{} bytes of data, at least 6 needed", data.len()));
            }
            let nlen = be_u32(data, 0) as usize;
            if nlen > data.len() - 6 {
                return Err(format!(
                    "name length {nlen} exceeds the option's {} bytes",
                    data.len()
                ));
            }
            let n = name(&data[4..4 + nlen])?;
            let count = be_u16(data, 4 + nlen) as usize;
            let rest = &data[6 + nlen..];
            if rest.len() != count * 2 {
                return Err(format!(
                    "{count} information requests announced, {} bytes follow",
                    rest.len()
                ));
            }
            let requests = rest.chunks_exact(2).map(|c| be_u16(c, 0)).collect();
            let r = InfoRequest { name: n, requests };
            Ok(if option == OPT_GO {
                ClientOption::Go(r)
            } else {
                ClientOption::Info(r)
            })
        }
        other => Ok(ClientOption::Unsupported(other)),
    }
}

/// Append one option reply.
pub fn option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    out.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// `NBD_REP_SERVER` for `NBD_OPT_LIST`.
pub fn rep_server(out: &mut Vec<u8>, name: &str) {
    let mut d = Vec::with_capacity(4 + name.len());
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    option_reply(out, OPT_LIST, REP_SERVER, &d);
}

/// `NBD_REP_INFO` with `NBD_INFO_EXPORT`.
pub fn info_export(out: &mut Vec<u8>, option: u32, size_bytes: u64, flags: u16) {
    let mut d = [0u8; 12];
    d[0..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
    d[2..10].copy_from_slice(&size_bytes.to_be_bytes());
    d[10..12].copy_from_slice(&flags.to_be_bytes());
    option_reply(out, option, REP_INFO, &d);
}

/// `NBD_REP_INFO` with `NBD_INFO_NAME`.
pub fn info_name(out: &mut Vec<u8>, option: u32, name: &str) {
    let mut d = INFO_NAME.to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    option_reply(out, option, REP_INFO, &d);
}

/// `NBD_REP_INFO` with `NBD_INFO_BLOCK_SIZE`.
pub fn info_block_size(out: &mut Vec<u8>, option: u32, min: u32, preferred: u32, max: u32) {
    let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    for v in [min, preferred, max] {
        d.extend_from_slice(&v.to_be_bytes());
    }
    option_reply(out, option, REP_INFO, &d);
}

/// The answer to `NBD_OPT_EXPORT_NAME`.
pub fn export_name_reply(out: &mut Vec<u8>, size_bytes: u64, flags: u16, no_zeroes: bool) {
    out.extend_from_slice(&size_bytes.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn go_data(name: &str, reqs: &[u16]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(reqs.len() as u16).to_be_bytes());
        for r in reqs {
            d.extend_from_slice(&r.to_be_bytes());
        }
        d
    }

    #[test]
    fn the_greeting_advertises_fixed_newstyle_and_no_zeroes() {
        let g = greeting();
        assert_eq!(&g[0..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(be_u16(&g, 16), 3);
    }

    #[test]
    fn unknown_client_flags_end_the_session() {
        assert!(parse_client_flags(3u32.to_be_bytes()).is_ok());
        assert_eq!(
            parse_client_flags(4u32.to_be_bytes()),
            Err(ProtoError::ClientFlags(4))
        );
    }

    #[test]
    fn go_carries_the_name_and_the_information_requests() {
        let o = parse_option(OPT_GO, &go_data("vm1/disk0", &[INFO_BLOCK_SIZE])).unwrap();
        assert_eq!(
            o,
            ClientOption::Go(InfoRequest {
                name: "vm1/disk0".into(),
                requests: vec![INFO_BLOCK_SIZE]
            })
        );
    }

    #[test]
    fn malformed_info_options_are_invalid_not_fatal() {
        assert!(parse_option(OPT_INFO, &[0, 0, 0, 9, 0, 0]).is_err());
        let mut d = go_data("a", &[1]);
        d.pop();
        assert!(parse_option(OPT_INFO, &d).is_err());
        assert!(parse_option(OPT_LIST, b"x").is_err());
        assert_eq!(parse_option(99, b"xyz"), Ok(ClientOption::Unsupported(99)));
    }

    #[test]
    fn option_headers_need_the_magic_and_a_bounded_length() {
        let mut h = [0u8; 16];
        h[0..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        h[8..12].copy_from_slice(&OPT_LIST.to_be_bytes());
        assert_eq!(
            parse_option_header(&h),
            Ok(OptionHeader {
                option: OPT_LIST,
                len: 0
            })
        );
        h[12..16].copy_from_slice(&(MAX_OPTION_BYTES + 1).to_be_bytes());
        assert!(matches!(
            parse_option_header(&h),
            Err(ProtoError::OptionTooLong { .. })
        ));
        h[0] = 0;
        assert!(matches!(
            parse_option_header(&h),
            Err(ProtoError::BadMagic { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn the_option_parser_never_panics_on_arbitrary_bytes(
            option in 0u32..12, data in proptest::collection::vec(any::<u8>(), 0..64)
        ) {
            let _ = parse_option(option, &data);
        }

        #[test]
        fn option_headers_parse_or_fail_cleanly(b in proptest::array::uniform16(any::<u8>())) {
            let _ = parse_option_header(&b);
        }

        #[test]
        fn well_formed_go_options_round_trip(
            name in "[a-z0-9/]{0,40}", reqs in proptest::collection::vec(0u16..5, 0..4)
        ) {
            let o = parse_option(OPT_GO, &go_data(&name, &reqs)).unwrap();
            prop_assert_eq!(o, ClientOption::Go(InfoRequest { name, requests: reqs }));
        }
    }
}
