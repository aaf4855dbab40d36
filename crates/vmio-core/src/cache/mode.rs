//! QEMU cache modes (QEMU docs, "-drive cache=", and qemu-options.hx):
//!
//! | mode         | cache.writeback | cache.direct | cache.no-flush |
//! |--------------|-----------------|--------------|----------------|
//! | writeback    | on              | off          | off            |
//! | none         | on              | on           | off            |
//! | writethrough | off             | off          | off            |
//! | directsync   | off             | on           | off            |
//! | unsafe       | on              | off          | on             |
//!
//! `cache.writeback=on` means the guest sees a volatile write cache (WCE=1) and must flush;
//! `off` means QEMU flushes after every write (O_DSYNC semantics). `cache.direct=on` opens the
//! image with O_DIRECT (bypassing the host page cache). `cache.no-flush=on` ignores guest
//! flushes. `pdc` is not QEMU's: it is writeback with S3's journal bypass ([`super::pdc`]).

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    Writeback,
    None,
    Writethrough,
    Directsync,
    Unsafe,
    /// vmio's PDC (`super::pdc`): writeback, with the guest's journal writes detected and
    /// sent around the host page cache.
    Pdc,
}

impl CacheMode {
    /// Every mode with its stack-file name and help line: the one declaration the stack
    /// parser, its error lines and `vmio help stack` read.
    pub const REGISTRY: [(CacheMode, &'static str, &'static str); 6] = [
        (
            CacheMode::None,
            "none",
            "O_DIRECT: the host page cache is bypassed; the guest sees a write cache and must flush",
        ),
        (
            CacheMode::Writeback,
            "writeback",
            "the host page cache holds reads and dirty writes; data is durable on guest flush (QEMU's default)",
        ),
        (
            CacheMode::Writethrough,
            "writethrough",
            "the host page cache holds reads; every write is durable before it completes (O_DSYNC)",
        ),
        (
            CacheMode::Directsync,
            "directsync",
            "O_DIRECT and O_DSYNC: no host page cache, every write durable before it completes",
        ),
        (
            CacheMode::Unsafe,
            "unsafe",
            "like writeback, but guest flushes are ignored (data is lost on a host crash)",
        ),
        (
            CacheMode::Pdc,
            "pdc",
            "writeback, but writes to the guest's journal (detected as a circular log) go around the host page cache (S3's PDC; [pdc] table)",
        ),
    ];

    /// The accepted names, for error lines: `none, writeback, writethrough, directsync, unsafe`.
    pub fn accepted() -> String {
        Self::REGISTRY.map(|(_, n, _)| n).join(", ")
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::REGISTRY
            .iter()
            .find(|(_, n, _)| *n == s)
            .map(|(m, _, _)| *m)
    }

    pub fn name(self) -> &'static str {
        Self::REGISTRY
            .iter()
            .find(|(m, _, _)| *m == self)
            .map_or("", |(_, n, _)| n)
    }

    /// The mode's help line.
    pub fn help(self) -> &'static str {
        Self::REGISTRY
            .iter()
            .find(|(m, _, _)| *m == self)
            .map_or("", |(_, _, h)| h)
    }

    /// `cache.writeback`: the guest sees a volatile write cache (WCE=1).
    pub fn guest_write_cache(self) -> bool {
        matches!(
            self,
            Self::Writeback | Self::None | Self::Unsafe | Self::Pdc
        )
    }

    /// `cache.direct`: the image is opened with O_DIRECT; the host page cache is not used.
    pub fn direct(self) -> bool {
        matches!(self, Self::None | Self::Directsync)
    }

    /// `cache.no-flush`: guest flushes are acknowledged without doing anything.
    pub fn ignores_flush(self) -> bool {
        matches!(self, Self::Unsafe)
    }

    /// Every write is made durable before it completes (QEMU flushes after each write
    /// when the guest has no write cache).
    pub fn write_through(self) -> bool {
        !self.guest_write_cache()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_table_matches_qemu() {
        use CacheMode::*;
        let table = [
            (Writeback, true, false, false),
            (None, true, true, false),
            (Writethrough, false, false, false),
            (Directsync, false, true, false),
            (Unsafe, true, false, true),
            (Pdc, true, false, false),
        ];
        for (m, wb, direct, noflush) in table {
            assert_eq!(m.guest_write_cache(), wb, "{m:?}");
            assert_eq!(m.direct(), direct, "{m:?}");
            assert_eq!(m.ignores_flush(), noflush, "{m:?}");
            assert_eq!(CacheMode::parse(m.name()), Some(m));
        }
        assert_eq!(CacheMode::parse("wb"), Option::None);
    }
}
