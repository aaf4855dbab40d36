//! What fio does to a job file's text before it parses an option: `include`, `${VAR}` and the
//! `$ncpus`-style keywords (with their arithmetic), and the size forms `N%` and `Nz`.
//!
//! Sources (fio 3.33): `init.c` `__parse_jobs_ini` (include), `options.c`
//! `fio_option_dup_subs`, `fio_keyword_replace`, `bc_calc`, `fio_keywords_init`, `parse.c`
//! `str_to_decimal`, `__get_mult_bytes` and the `FIO_OPT_STR_VAL_ZONE` case of
//! `__handle_option`, `options.c` `str_size_cb`/`str_offset_cb`, `zbd.c`
//! `zbd_recalc_options_with_zone_granularity`.
//!
//! ```text
//! include FILE    inside a section: FILE's lines are options of that section; a relative FILE is
//!                 taken from the including file's directory; a [section] in FILE is refused
//!                 ("No new sections in included files"), as is a cycle or a nesting deeper
//!                 than MAX_INCLUDE_DEPTH; before any section it is an option outside a section
//! ${NAME}         the environment variable NAME (from the caller: vmio-core reads no
//!                 environment); unset -> the empty string, as fio (no error)
//! $pagesize       the SIMULATED guest's page size (4096), $mb_memory its memory in MiB and
//! $mb_memory      $ncpus its vCPUs (the VM running the job file; fio reads them from the
//! $ncpus          machine it runs on); replaced anywhere in a line, then, when one was
//!                 replaced and the value holds + - * or /, the value is computed as bc would
//!                 (integers, + - * / %, parentheses, division truncating)
//! $jobnum $jobname $filenum $clientuid
//!                 left as written here: fio expands them only in filename_format, when it
//!                 names a job's files (`workload::fio_files`); any other '$' is literal
//!                 text, as in fio
//! (expr)          fio's arithmetic is compiled in only with CONFIG_ARITHMETIC, which Debian's
//!                 fio 3.33 lacks ("failed parsing bs=(2*2048)"): vmio refuses it the same way
//! size N%         a share of the disk (block jobs) or of the fixed filesize (file jobs),
//! offset N%       0..100, resolved where the region is known (`vmio-sim`'s `bind_jobs`);
//!                 fio rounds the size down to the smallest block size and the offset up
//! size Nz         N zones of `zonesize` (zonemode=strided or zbd); without a zone size fio
//! offset Nz       fails ("you need to specify size="), and so does vmio, with one line
//! ```
//!
//! `kb_base` is applied by the parser to the whole section whatever its position (fio sorts a
//! section's options by priority and `kb_base` comes first); sizes then follow
//! [`crate::units::parse_size_kb_base`].

use std::path::Path;

/// How deep `include` may nest (fio has no limit but a stack; vmio refuses past this).
pub const MAX_INCLUDE_DEPTH: usize = 16;

/// The machine fio's keywords describe: the simulated guest that runs the job file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    /// `$ncpus`: the guest's vCPUs.
    pub ncpus: u32,
    /// `$pagesize`: the guest's page size in bytes.
    pub pagesize: u64,
    /// `$mb_memory`: the guest's memory in MiB.
    pub mb_memory: u64,
}

/// The environment: the value of a variable, None when unset.
pub type EnvFn = dyn Fn(&str) -> Option<String>;
/// A file loader: the text of a file given its path, or why it cannot be read.
pub type LoadFn = dyn Fn(&str) -> Result<String, String>;

/// What the reader needs from outside (vmio-core does no I/O and reads no environment).
#[derive(Default)]
pub struct ReadContext<'a> {
    /// `${NAME}`: the environment's value of NAME, None when unset.
    pub env: Option<&'a EnvFn>,
    /// `include`: the text of a file given its resolved path, or why it cannot be read.
    pub load: Option<&'a LoadFn>,
    /// `$ncpus`, `$pagesize`, `$mb_memory`; None: refused (no simulated machine is known).
    pub host: Option<Host>,
}

/// A value size options accept: bytes, a percentage or a zone count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SizeValue {
    Bytes(u64),
    Percent(u32),
    Zones(u64),
}

/// Read a size under `kb_base`, with fio's `N%` and `Nz` forms.
pub(super) fn size_value(text: &str, kb_base: u64) -> Result<SizeValue, String> {
    let t = text.trim();
    if let Some(p) = t.strip_suffix('%') {
        return match p.trim().parse::<u32>() {
            Ok(n) if n <= 100 && p.trim().bytes().all(|b| b.is_ascii_digit()) => {
                Ok(SizeValue::Percent(n))
            }
            _ => Err("a percentage is an integer from 0 to 100 followed by %".to_string()),
        };
    }
    if let Some(z) = t.strip_suffix(['z', 'Z']) {
        return match z.parse::<u64>() {
            Ok(n) if z.bytes().all(|b| b.is_ascii_digit()) => Ok(SizeValue::Zones(n)),
            _ => Err("a zone count is an integer followed by z".to_string()),
        };
    }
    crate::units::parse_size_kb_base(t, kb_base)
        .map(SizeValue::Bytes)
        .map_err(|e| e.to_string())
}

/// Where an included file is: an absolute name as written, a relative one from the including
/// file's directory (fio tries the working directory first; vmio has none to try).
pub(super) fn include_path(including: &str, name: &str) -> String {
    if name.starts_with('/') {
        return name.to_string();
    }
    match Path::new(including).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(name).to_string_lossy().into_owned(),
        _ => name.to_string(),
    }
}

/// fio's `fio_option_dup_subs` then `fio_keyword_replace` on one `key=value` text.
pub(super) fn substitute(text: &str, ctx: &ReadContext) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                if let Some(v) = ctx.env.and_then(|env| env(name)) {
                    out.push_str(&v);
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("${");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    let keywords = [
        ("$pagesize", ctx.host.map(|h| h.pagesize)),
        ("$mb_memory", ctx.host.map(|h| h.mb_memory)),
        ("$ncpus", ctx.host.map(|h| u64::from(h.ncpus))),
    ];
    let mut replaced = false;
    for (word, value) in keywords {
        if out.contains(word) {
            let v = value.ok_or_else(|| {
                format!("{word} needs the simulated machine, which this reading does not know")
            })?;
            out = out.replace(word, &v.to_string());
            replaced = true;
        }
    }
    if replaced && out.contains(['+', '-', '*', '/']) && !out.contains('\'') {
        if let Some((key, value)) = out.split_once('=') {
            let v = arithmetic(value.trim()).ok_or_else(|| {
                format!(
                    "'{}' is not arithmetic fio's bc computes (integers, + - * / %, parentheses)",
                    crate::units::quote(value.trim())
                )
            })?;
            out = format!("{key}={v}");
        }
    }
    Ok(out)
}

/// bc's integer arithmetic (scale 0): `+ - * / %`, unary minus, parentheses.
fn arithmetic(text: &str) -> Option<i128> {
    let tokens: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut at = 0;
    let v = sum(&tokens, &mut at)?;
    (at == tokens.len()).then_some(v)
}

fn sum(t: &[char], at: &mut usize) -> Option<i128> {
    let mut v = product(t, at)?;
    while let Some(&op) = t.get(*at).filter(|c| matches!(c, '+' | '-')) {
        *at += 1;
        let r = product(t, at)?;
        v = if op == '+' {
            v.checked_add(r)?
        } else {
            v.checked_sub(r)?
        };
    }
    Some(v)
}

fn product(t: &[char], at: &mut usize) -> Option<i128> {
    let mut v = unary(t, at)?;
    while let Some(&op) = t.get(*at).filter(|c| matches!(c, '*' | '/' | '%')) {
        *at += 1;
        let r = unary(t, at)?;
        v = match op {
            '*' => v.checked_mul(r)?,
            '/' => v.checked_div(r)?,
            _ => v.checked_rem(r)?,
        };
    }
    Some(v)
}

fn unary(t: &[char], at: &mut usize) -> Option<i128> {
    match t.get(*at)? {
        '-' => {
            *at += 1;
            unary(t, at)?.checked_neg()
        }
        '(' => {
            *at += 1;
            let v = sum(t, at)?;
            (t.get(*at) == Some(&')')).then(|| *at += 1)?;
            Some(v)
        }
        c if c.is_ascii_digit() => {
            let start = *at;
            while t.get(*at).is_some_and(|c| c.is_ascii_digit()) {
                *at += 1;
            }
            t[start..*at].iter().collect::<String>().parse().ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host {
            ncpus: 4,
            pagesize: 4096,
            mb_memory: 2048,
        }
    }

    fn sub(text: &str) -> Result<String, String> {
        let env = |name: &str| (name == "BS").then(|| "64k".to_string());
        let ctx = ReadContext {
            env: Some(&env),
            load: None,
            host: Some(host()),
        };
        substitute(text, &ctx)
    }

    #[test]
    fn an_environment_variable_is_replaced_and_an_unset_one_becomes_empty_as_in_fio() {
        assert_eq!(sub("bs=${BS}").unwrap(), "bs=64k");
        assert_eq!(sub("directory=/mnt/${NOPE}x").unwrap(), "directory=/mnt/x");
        assert_eq!(sub("a=${unclosed").unwrap(), "a=${unclosed");
    }

    #[test]
    fn keywords_take_the_simulated_guest_and_their_arithmetic_is_bcs() {
        assert_eq!(sub("numjobs=$ncpus").unwrap(), "numjobs=4");
        assert_eq!(sub("numjobs=$ncpus*2-1").unwrap(), "numjobs=7");
        assert_eq!(sub("size=($mb_memory/3)").unwrap(), "size=682");
        assert_eq!(sub("bs=$pagesize").unwrap(), "bs=4096");
        // Names fio expands elsewhere, and other dollars, stay as written.
        assert_eq!(
            sub("filename_format=f.$jobnum.$filenum").unwrap(),
            "filename_format=f.$jobnum.$filenum"
        );
        assert!(sub("size=$ncpus-x").unwrap_err().contains("not arithmetic"));
        let ctx = ReadContext::default();
        assert!(substitute("numjobs=$ncpus", &ctx)
            .unwrap_err()
            .contains("$ncpus needs the simulated machine"));
    }

    #[test]
    fn sizes_take_percentages_and_zone_counts() {
        assert_eq!(size_value("50%", 1024), Ok(SizeValue::Percent(50)));
        assert_eq!(size_value("8z", 1024), Ok(SizeValue::Zones(8)));
        assert_eq!(size_value("4KiB", 1024), Ok(SizeValue::Bytes(4000)));
        assert_eq!(size_value("4KiB", 1000), Ok(SizeValue::Bytes(4096)));
        assert_eq!(size_value("4k", 1000), Ok(SizeValue::Bytes(4000)));
        assert!(size_value("101%", 1024).is_err());
        assert!(size_value("xz", 1024).is_err());
    }

    #[test]
    fn an_include_is_taken_from_the_including_files_directory() {
        assert_eq!(include_path("/a/b/job.fio", "c.fio"), "/a/b/c.fio");
        assert_eq!(include_path("job.fio", "c.fio"), "c.fio");
        assert_eq!(include_path("/a/job.fio", "/etc/c.fio"), "/etc/c.fio");
    }
}
