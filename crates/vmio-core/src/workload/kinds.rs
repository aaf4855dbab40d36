//! The registries of the workload kinds a job or a command names: FileBench personalities
//! (`filebench::PERSONALITIES`), applications (`apps::APPS`), trace formats (`trace::FORMATS`) and
//! synthetic trace profiles (`synth::PROFILES`). Each kind declares its entries
//! once, in its own file, as a list of [`KindEntry`]; its `parse`, `name`, the accepted list
//! of its error line and [`help_text`](super::help_text) all read that list, so a new entry
//! is one line there. This file is the kinds' shared vocabulary; the workload layer's `mod.rs`
//! lists the four registries in `help_text`.
//!
//! ```text
//! find(table, s):  the entry whose name, alias or quiet alias is trim(lowercase(s))
//! accepted(table): "name1, name2 (alias, ...), ..."  (quiet aliases are not shown)
//! section(table):  a title line, then per entry "  name (aliases)  help" (help_text)
//! ```

/// One entry of a kind's registry. The kind's enum lists its variants in the registry's
/// order, so `TABLE[variant as usize]` is the variant's entry (each kind tests this).
#[derive(Debug)]
pub struct KindEntry<K: 'static, P: 'static> {
    pub kind: K,
    /// The canonical name (what `name()` returns), lowercase.
    pub name: &'static str,
    /// Other spellings `parse` accepts, shown in the accepted list and the help.
    pub aliases: &'static [&'static str],
    /// Spellings `parse` also accepts but no list shows.
    pub quiet_aliases: &'static [&'static str],
    /// One line: what the entry is and where it comes from.
    pub help: &'static str,
    /// What the kind needs to run it: a personality's FileBench parameters, a format's
    /// parser, a profile's generator knobs.
    pub params: P,
}

/// The entry named `name` (case-insensitive, surrounding blanks ignored).
pub(crate) fn find<K, P>(
    table: &'static [KindEntry<K, P>],
    name: &str,
) -> Option<&'static KindEntry<K, P>> {
    let name = name.trim().to_ascii_lowercase();
    table.iter().find(|e| {
        e.name == name
            || e.aliases.contains(&name.as_str())
            || e.quiet_aliases.contains(&name.as_str())
    })
}

/// One entry's name with its shown aliases: `spc (umass)`.
fn label<K, P>(e: &KindEntry<K, P>) -> String {
    if e.aliases.is_empty() {
        e.name.to_string()
    } else {
        format!("{} ({})", e.name, e.aliases.join(", "))
    }
}

/// The accepted list of an error line: `msr, spc (umass), blkparse, fio-iolog (iolog)`.
pub(crate) fn accepted<K, P>(table: &[KindEntry<K, P>]) -> String {
    table.iter().map(label).collect::<Vec<_>>().join(", ")
}

pub(super) fn section<K, P>(out: &mut String, title: &str, table: &[KindEntry<K, P>]) {
    let labels: Vec<String> = table.iter().map(label).collect();
    let width = labels.iter().map(String::len).max().unwrap_or(0);
    out.push_str(title);
    out.push('\n');
    for (e, l) in table.iter().zip(&labels) {
        out.push_str(&format!("  {l:width$}  {}\n", e.help));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_accepts_a_quiet_alias_in_any_case_with_blanks_around() {
        let e = find(super::super::trace::FORMATS, " SNIA-MSR ").unwrap();
        assert_eq!(e.name, "msr");
        assert!(find(super::super::trace::FORMATS, "webproxy").is_none());
    }
}
