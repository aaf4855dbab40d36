//! `vmio help stack`: the stack file's selectable layers — `[[vm.disk]] interface` and
//! `cache`, `[page_cache] eviction`, `[scheduler] name`, `[[volume]] layout`,
//! `[[device]] model` — with every entry's parameters (and `[page_cache]`'s own), rendered
//! from the registries ([`vmio_core::stack::Interface::REGISTRY`],
//! [`vmio_core::cache::CacheMode::REGISTRY`], [`vmio_core::cache::eviction::REGISTRY`] and
//! [`vmio_core::cache::linux::PARAMS`], [`vmio_core::sched::REGISTRY`],
//! [`vmio_core::volume::REGISTRY`], [`crate::device::REGISTRY`]) the stack parser reads, as
//! `qemu-system-x86_64 -device help` lists device properties. The README's tables are this
//! command's Markdown output, kept equal by a test.
//!
//! ```text
//! layers() = [vdisk interfaces (note: aliases), QEMU cache modes, volume layouts (note:
//!             device count), schedulers, eviction policies with the page cache's
//!             parameters, device models (note: profiles)]
//! text     = per layer: "table selector = a | b | c (default)", one line per entry,
//!            one line per parameter (entries sharing a declaration share the line)
//! markdown = per layer: an entry table and a parameter table
//! ```

use vmio_core::cache::{eviction, linux, CacheMode};
use vmio_core::params::{self, Described, Layer};
use vmio_core::stack::Interface;
use vmio_core::{sched, volume};

use crate::device;

/// The layers as help shows them.
pub fn layers() -> Vec<Layer<'static>> {
    vec![
        Layer {
            table: "[[vm.disk]]",
            selector: "interface",
            default: Interface::VirtioBlk.name(),
            entries: Interface::REGISTRY
                .iter()
                .map(|(_, name, aliases, help)| Described {
                    name,
                    help,
                    note: if aliases.is_empty() {
                        String::new()
                    } else {
                        format!("also: {}", aliases.join(", "))
                    },
                    params: &[],
                })
                .collect(),
            params: &[],
        },
        Layer {
            table: "[[vm.disk]]",
            selector: "cache",
            default: CacheMode::Writeback.name(),
            entries: CacheMode::REGISTRY
                .iter()
                .map(|(_, name, help)| Described {
                    name,
                    help,
                    note: String::new(),
                    params: &[],
                })
                .collect(),
            params: &[],
        },
        Layer {
            table: "[[volume]]",
            selector: "layout",
            default: "required",
            entries: volume::REGISTRY
                .iter()
                .map(|e| Described::new(e, volume::device_count_note(e)))
                .collect(),
            params: &[],
        },
        Layer {
            table: "[scheduler]",
            selector: "name",
            default: sched::DEFAULT,
            entries: sched::REGISTRY
                .iter()
                .map(|e| Described::new(e, String::new()))
                .collect(),
            params: &[],
        },
        Layer {
            table: "[page_cache]",
            selector: "eviction",
            default: eviction::DEFAULT,
            entries: eviction::REGISTRY
                .iter()
                .map(|e| Described {
                    name: e.name,
                    help: e.help,
                    note: "vmio sim only: in vmio serve the kernel evicts".to_string(),
                    params: &[],
                })
                .collect(),
            params: linux::PARAMS,
        },
        Layer {
            table: "[[device]]",
            selector: "model",
            default: "required",
            entries: device::REGISTRY
                .iter()
                .map(|e| {
                    let note = format!("profiles: {} (default)", e.build.profiles.join(", "));
                    Described::new(e, note)
                })
                .collect(),
            params: &[],
        },
    ]
}

/// The help text (`markdown`: the README's tables).
pub fn stack(markdown: bool) -> String {
    if markdown {
        params::render_markdown(&layers())
    } else {
        params::render_text(&layers())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "<!-- BEGIN vmio help stack --markdown -->\n";
    const END: &str = "<!-- END vmio help stack --markdown -->";

    #[test]
    fn the_readme_tables_are_the_generated_ones() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let start = readme.find(BEGIN).expect("README has the BEGIN marker") + BEGIN.len();
        let end = readme.find(END).expect("README has the END marker");
        assert!(
            readme[start..end].trim() == stack(true).trim(),
            "README.md's tables differ from `vmio help stack --markdown`; paste its output \
             between the markers:\n{}",
            stack(true)
        );
    }

    #[test]
    fn help_lists_every_registered_entry_and_parameter() {
        let text = stack(false);
        for name in ["raid0", "mq-deadline", "mcfq", "ssd", "hdd-7200-2tb"] {
            assert!(text.contains(name), "{name}: {text}");
        }
        assert!(
            text.contains(
                "[scheduler] name = none | mq-deadline | cfq | mcfq   (default: mq-deadline)"
            ),
            "{text}"
        );
        assert!(text.contains("slice_sync"), "{text}");
        assert!(
            text.contains("    quantum            cfq, mcfq: "),
            "{text}"
        );
        assert!(text.contains("chunk"), "{text}");
        assert!(
            text.contains("    dirty_ratio        % of the cache dirty at which writers"),
            "{text}"
        );
        assert!(text.contains("default half of [host] memory]"), "{text}");
        assert!(text.contains("gc_policy"), "{text}");
    }
}
