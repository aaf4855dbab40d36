//! Which option names fio 3.33 knows, and its suggestion for one it does not.
//!
//! fio reads a section's options in two passes (options.c `fio_options_parse`, parse.c
//! `find_option_c`, options.h `o_match`):
//!
//! ```text
//! for each option of the section:
//!     a name or alias of fio_options[] (exact, case-sensitive match)  -> parsed
//!     of type FIO_OPT_DEPRECATED                                     -> "Option X is deprecated", the job fails
//!     else                                                           -> kept for the second pass
//! second pass (the job's ioengine loaded):
//!     a name of the engine's own options[]                           -> parsed
//!     else -> "Bad option <key=value>", then show_closest_option:
//!             the first name of fio_options[] (not aliases) at the least Levenshtein
//!             distance d from the key (parse.c string_distance); printed as
//!             "Did you mean NAME?" when d <= (len(key) + 1) / 2 (string_distance_ok)
//! ```
//!
//! vmio refuses the same names ([`check`]), with fio's words and suggestion in one line; the
//! names are fio's own tables, extracted into [`super::fio_names`]. vmio adds its own
//! options ([`VMIO_OPTIONS`]), and reads names in any case (a name fio would refuse only for
//! its case is refused here too, with the lowercase name suggested).

use super::fio_names::{FIO_ALIASES, FIO_DEPRECATED, FIO_ENGINE_OPTIONS, FIO_OPTIONS};

/// vmio's own job options (no fio option has these names; [`ACCEPTED`] says `cpu_*` for the
/// three `cpu_` ones): workloads of a level above fio's
/// (`filebench`, `app`, `iozone`), trace formats (`iolog_format`) and CPU work
/// (`cpu_profile`, `cpu_work`, `cpu_ipc`).
pub const VMIO_OPTIONS: &[&str] = &[
    "iolog_format",
    "filebench",
    "app",
    "iozone",
    "cpu_profile",
    "cpu_work",
    "cpu_ipc",
];

/// The accepted names, as an error message says them.
pub const ACCEPTED: &str = "fio 3.33's options (fio --cmdhelp=all, fio --enghelp=ENGINE) and vmio's own (iolog_format, filebench, app, iozone, cpu_*)";

/// What fio 3.33 (and vmio) make of an option name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// A name or alias of fio's main table, or one of vmio's own options.
    Option,
    /// An option only of some engines' own tables: known when the job runs one of them.
    EngineOption,
}

/// Whether `name` (as written) is an option of fio's main table (name or alias) or vmio's.
pub fn is_main_option(name: &str) -> bool {
    FIO_OPTIONS.contains(&name)
        || FIO_ALIASES.iter().any(|&(alias, _)| alias == name)
        || VMIO_OPTIONS.contains(&name)
}

/// Whether engine `engine`'s own option table has `name`.
pub fn is_engine_option(engine: &str, name: &str) -> bool {
    FIO_ENGINE_OPTIONS
        .iter()
        .any(|&(e, n)| e == engine && n == name)
}

/// The engines whose own tables have `name`, in table order, once each.
pub fn engines_of(name: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for &(e, n) in FIO_ENGINE_OPTIONS {
        if n == name && !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

/// fio's reading of option name `name` (as written, before lowercasing): known (how), or the
/// reason it is refused (`Err`), with fio's suggestion when it has one.
pub fn check(name: &str) -> Result<Known, String> {
    if is_main_option(name) {
        return Ok(Known::Option);
    }
    if !engines_of(name).is_empty() {
        return Ok(Known::EngineOption);
    }
    if FIO_DEPRECATED.contains(&name) {
        return Err(format!(
            "fio 3.33 refuses it (\"Option {name} is deprecated\")"
        ));
    }
    // The name is in the `Bad option <...>` the caller prints: not repeated here.
    let mut reason = "no such option in fio 3.33".to_string();
    let lower = name.to_ascii_lowercase();
    if let Some(guess) = closest_option(name) {
        reason.push_str(&format!(" (Did you mean {guess}?)"));
    } else if lower != name && (is_main_option(&lower) || !engines_of(&lower).is_empty()) {
        reason.push_str(&format!(
            " (fio's names are case-sensitive: did you mean {lower}?)"
        ));
    }
    Err(reason)
}

/// fio's `show_closest_option`: the first name of `fio_options[]` at the least
/// [`string_distance`] from `name`, if that distance is at most `(len + 1) / 2` (integer)
/// (`string_distance_ok`).
pub fn closest_option(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return None;
    }
    let mut best: Option<(&'static str, usize)> = None;
    for &option in FIO_OPTIONS {
        let d = string_distance(name.as_bytes(), option.as_bytes());
        if best.is_none_or(|(_, b)| d < b) {
            best = Some((option, d));
        }
    }
    best.filter(|&(_, d)| d <= name.len().div_ceil(2))
        .map(|(o, _)| o)
}

/// Levenshtein distance over bytes (fio's parse.c `string_distance`: insertions, deletions and
/// substitutions each cost 1). Both rows are as long as `b`, so the cost is bounded by the
/// longest option name times `a`'s length.
pub fn string_distance(a: &[u8], b: &[u8]) -> usize {
    let mut p: Vec<usize> = (0..=b.len()).collect();
    let mut q = vec![0usize; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        q[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = p[j] + usize::from(ca != cb);
            q[j + 1] = (q[j] + 1).min(sub).min(p[j + 1] + 1);
        }
        std::mem::swap(&mut p, &mut q);
    }
    p[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_distance_is_levenshtein_s() {
        assert_eq!(string_distance(b"iodepht", b"iodepth"), 2);
        assert_eq!(string_distance(b"kitten", b"sitting"), 3);
        assert_eq!(string_distance(b"", b"bs"), 2);
        assert_eq!(string_distance(b"bs", b"bs"), 0);
    }

    #[test]
    fn a_mistyped_option_gets_fio_s_suggestion() {
        assert_eq!(closest_option("iodepht"), Some("iodepth"));
        assert_eq!(closest_option("runtim"), Some("runtime"));
        // Too far from every name for fio to guess.
        assert_eq!(closest_option("zzzzzzzzzzzz"), None);
        let why = check("iodepht").unwrap_err();
        assert!(why.contains("Did you mean iodepth?"), "{why}");
    }

    #[test]
    fn names_aliases_vmio_s_own_and_engine_options_are_known() {
        assert_eq!(check("iodepth"), Ok(Known::Option));
        assert_eq!(check("blocksize"), Ok(Known::Option));
        assert_eq!(check("gtod_reduce"), Ok(Known::Option));
        assert_eq!(check("filebench"), Ok(Known::Option));
        assert_eq!(check("hipri"), Ok(Known::EngineOption));
        assert!(check("rwmixcycle").unwrap_err().contains("deprecated"));
    }

    #[test]
    fn an_uppercase_name_is_refused_like_fio_does_with_the_lowercase_one_suggested() {
        let why = check("IODEPTH").unwrap_err();
        assert!(why.contains("did you mean iodepth?"), "{why}");
    }

    /// The fio installed here, or None (then the test is skipped, except under CI=true,
    /// where fio is installed and its absence is a failure).
    fn real_fio() -> Option<&'static str> {
        let found = std::process::Command::new("fio")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found && std::env::var("CI").as_deref() == Ok("true") {
            panic!("fio is not installed, and CI=true: the registry must be checked against it");
        }
        found.then_some("fio")
    }

    fn run(fio: &str, args: &[&str]) -> String {
        let o = std::process::Command::new(fio).args(args).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    }

    /// `fio --parse-only` of a one-job file with `line`: what fio prints.
    fn parse_only(fio: &str, line: &str) -> String {
        // One file a call: the tests run on threads of one process, so the pid alone is
        // shared (one test removed the file another's fio was about to open).
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("vmio-names-{}-{n}.fio", std::process::id()));
        std::fs::write(&path, format!("[j]\n{line}\n")).unwrap();
        let out = run(fio, &["--parse-only", path.to_str().unwrap()]);
        std::fs::remove_file(&path).ok();
        out
    }

    /// Options of fio_options[] only under a build option the fio here was built without.
    const BUILD_ONLY: &[(&str, &str)] = &[("gpu_dev_id", "CONFIG_CUDA")];

    #[test]
    fn the_registry_holds_the_names_the_installed_fio_knows_and_no_other() {
        let Some(fio) = real_fio() else { return };
        assert!(run(fio, &["--version"]).starts_with("fio-3.33"));
        // Every option fio's help lists is in the registry.
        for line in run(fio, &["--cmdhelp=all"]).lines() {
            let name = line.split(':').next().unwrap().trim();
            if !name.is_empty() {
                assert!(
                    FIO_OPTIONS.contains(&name),
                    "fio lists {name}, the registry does not"
                );
            }
        }
        // Every name and alias of the registry is one fio knows: its help for the name, or,
        // for the deprecated ones (which its help hides), its "is deprecated".
        let aliases = FIO_ALIASES.iter().map(|&(a, _)| a);
        for name in FIO_OPTIONS.iter().copied().chain(aliases) {
            if BUILD_ONLY.iter().any(|&(n, _)| n == name) {
                continue;
            }
            if run(fio, &[&format!("--cmdhelp={name}")]).contains("No such command") {
                let out = parse_only(fio, &format!("{name}=1"));
                assert!(
                    out.contains(&format!("Option {name} is deprecated")),
                    "{name}: {out}"
                );
            }
        }
        for &name in FIO_DEPRECATED {
            let out = parse_only(fio, &format!("{name}=1"));
            assert!(
                out.contains(&format!("Option {name} is deprecated")),
                "{name}: {out}"
            );
        }
        // Each engine's own options, for the engines this fio was built with.
        let mut engines: Vec<&str> = FIO_ENGINE_OPTIONS.iter().map(|&(e, _)| e).collect();
        engines.dedup();
        for engine in engines {
            let help = run(fio, &[&format!("--enghelp={engine}")]);
            if help.contains("not found") || help.contains("not loadable") {
                continue;
            }
            let mut listed: Vec<&str> = help
                .lines()
                .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim()))
                .collect();
            let mut ours: Vec<&str> = FIO_ENGINE_OPTIONS
                .iter()
                .filter(|&&(e, _)| e == engine)
                .map(|&(_, n)| n)
                .collect();
            listed.sort_unstable();
            ours.sort_unstable();
            // The help lists names; an alias of ours (net's `proto`) must be one fio takes.
            for &name in &ours {
                if !listed.contains(&name) {
                    let out = parse_only(fio, &format!("ioengine={engine}\n{name}=1"));
                    assert!(
                        !out.contains("Bad option"),
                        "ioengine={engine} {name}: {out}"
                    );
                }
            }
            ours.retain(|n| listed.contains(n));
            assert_eq!(listed, ours, "ioengine={engine}");
        }
    }

    #[test]
    fn the_suggestion_is_the_one_the_installed_fio_prints() {
        let Some(fio) = real_fio() else { return };
        for typo in [
            "iodepht",
            "runtim",
            "blocksise",
            "numjob",
            "direkt",
            "ratee",
            "xyzzyq",
        ] {
            let out = parse_only(fio, &format!("{typo}=1"));
            assert!(out.contains(&format!("Bad option <{typo}=1>")), "{out}");
            let theirs = out
                .lines()
                .find_map(|l| l.strip_prefix("Did you mean ")?.strip_suffix('?'));
            assert_eq!(closest_option(typo), theirs, "{typo}: {out}");
        }
    }
}
