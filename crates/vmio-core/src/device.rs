//! The device layer's table, `[[device]]`: a device model's instance (its model and
//! parameters belong to `vmio_sim::device::REGISTRY`, read by the simulator), its backing
//! file for `vmio serve`, or a region of an earlier device's hardware (`share`).
//!
//! ```text
//! name:     non-empty, unique
//! path:     non-empty, no NUL; size: a positive multiple of 4k
//! model:    required unless share; the model's parameters are the table's other keys
//! share:    an earlier device that does not share itself (no chains)
//! model, profile, a model parameter with share -> "'model' with 'share': ..."
//! start, capacity: sizes, multiples of 4k, capacity > 0; start without share is refused
//! ```
//!
//! Where each region lies on its hardware needs the hardware's capacity (the simulator's
//! models): the stack resolves it (`Stack::regions`), as it checks that no two devices share
//! a backing file.

use crate::params::{self, KeyDoc};
use crate::table::{FieldError, SizeValue, Table};
use crate::units::quote;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RawDevice {
    pub name: String,
    /// Required unless `share` is set (then refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub profile: Option<String>,
    /// The earlier device whose hardware this device is a region of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    /// Where the region begins on the hardware (with `share`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<SizeValue>,
    /// Backing file or block device of the real engine (`vmio serve`); the simulator
    /// ignores it. Relative paths are relative to the stack file's directory.
    pub path: Option<String>,
    /// Size of the backing file (created sparse at this size when missing).
    pub size: Option<SizeValue>,
    #[serde(flatten)]
    pub params: BTreeMap<String, toml::Value>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DeviceSpec {
    pub name: String,
    pub model: String,
    pub profile: Option<String>,
    /// Backing file or block device for `vmio serve`, as written in the stack file.
    pub path: Option<String>,
    /// Size of the backing file for `vmio serve` (a multiple of 4k).
    pub size_bytes: Option<u64>,
    pub params: BTreeMap<String, toml::Value>,
    /// `share`: the device is a region of another device's hardware (then `model` is the
    /// hardware's, `profile` None and `params` empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareSpec>,
}

impl DeviceSpec {
    /// The size of the device's backing file for `vmio serve`: `size`, else a sharing
    /// device's `capacity` (its region's size) when the stack writes it.
    pub fn backing_size_bytes(&self) -> Option<u64> {
        self.size_bytes
            .or_else(|| self.share.as_ref().and_then(|s| s.capacity_bytes))
    }
}

/// `share = "a"` as read: the region's hardware and what the file says of its place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShareSpec {
    /// The device whose hardware it shares (an index into the stack's devices, earlier, not
    /// itself sharing).
    pub device: usize,
    /// `start`: None, right after the earlier regions of the hardware.
    pub start_bytes: Option<u64>,
    /// `capacity`: None, up to the hardware's end.
    pub capacity_bytes: Option<u64>,
}

/// A device's place on its hardware, as resolved by the stack's `regions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The device whose model is the hardware (an index into the stack's devices).
    pub hardware: usize,
    pub start_bytes: u64,
    pub capacity_bytes: u64,
}

/// The `[[device]]` keys of a sharing device, for `vmio help stack`.
pub const SHARE_KEYS: [KeyDoc; 3] = [
    KeyDoc {
        name: "share",
        help: "this device is a region of that device's hardware (a second file or partition on the same disk): one device model, one request queue per device",
        accepted: "the name of an earlier device that does not share (then no model, profile or model parameter)",
        default: "none",
    },
    KeyDoc {
        name: "start",
        help: "with share: where the region begins on the hardware",
        accepted: "a size, a multiple of 4k",
        default: "right after the earlier regions on the hardware, the shared device's own being [0, its size), or all of it without size",
    },
    KeyDoc {
        name: "capacity",
        help: "with share: the region's size (the model's parameter otherwise)",
        accepted: "a positive size, a multiple of 4k; start + capacity within the hardware's capacity",
        default: "the hardware's capacity less start",
    },
];

/// The keys a sharing device accepts (its error lines list them).
const SHARE_ACCEPTED: &str = "name, share, start, capacity, path, size";

/// `[[device]]` at `field` (`device[2]`); the context is the devices before it.
impl Table for DeviceSpec {
    const KEY: &'static str = "device";
    type Raw = RawDevice;
    type Context<'a> = &'a [DeviceSpec];

    fn from_raw(d: &RawDevice, field: &str, earlier: &[DeviceSpec]) -> Result<Self, FieldError> {
        if d.name.is_empty() {
            return Err(FieldError::new(
                format!("{field}.name"),
                "must not be empty",
            ));
        }
        if earlier.iter().any(|e| e.name == d.name) {
            return Err(FieldError::new(
                format!("{field}.name"),
                format!("'{}' is defined twice", d.name),
            ));
        }
        if d.path
            .as_deref()
            .is_some_and(|p| p.is_empty() || p.contains('\0'))
        {
            return Err(FieldError::new(
                format!("{field}.path"),
                "must be a non-empty file or block-device path",
            ));
        }
        let size_bytes = match &d.size {
            Some(v) => Some(v.bytes(&format!("{field}.size"))?),
            None => None,
        };
        if let Some(b) = size_bytes {
            if b == 0 || b % 4096 != 0 {
                return Err(FieldError::new(
                    format!("{field}.size"),
                    format!("{b} bytes: must be a positive multiple of 4k"),
                ));
            }
        }
        let share = share(field, d, earlier)?;
        let (model, params) =
            match (&share, &d.model) {
                (Some(s), _) => (earlier[s.device].model.clone(), BTreeMap::new()),
                (None, Some(m)) => (m.clone(), d.params.clone()),
                (None, None) => return Err(FieldError::new(
                    format!("{field}.model"),
                    "missing; accepted: a model (vmio help stack), or share = an earlier device",
                )),
            };
        Ok(DeviceSpec {
            name: d.name.clone(),
            model,
            profile: d.profile.clone(),
            path: d.path.clone(),
            size_bytes,
            params,
            share,
        })
    }
}

/// `share`, `start` and `capacity` of the device at `field` (`earlier`: the devices before
/// it): None when it does not share.
fn share(
    field: &str,
    d: &RawDevice,
    earlier: &[DeviceSpec],
) -> Result<Option<ShareSpec>, FieldError> {
    let Some(target) = &d.share else {
        if d.start.is_some() {
            return Err(FieldError::new(
                format!("{field}.start"),
                "only valid with share = an earlier device",
            ));
        }
        return Ok(None);
    };
    let refused = |key: &str, what: &str| {
        FieldError::new(
            format!("{field} '{}'", quote(&d.name)),
            format!(
                "'{}' with 'share': a shared device has its hardware's {what}; accepted: {SHARE_ACCEPTED}",
                quote(key)
            ),
        )
    };
    if d.model.is_some() {
        return Err(refused("model", "model"));
    }
    if d.profile.is_some() {
        return Err(refused("profile", "profile"));
    }
    if let Some(key) = d.params.keys().find(|k| *k != "capacity") {
        return Err(refused(key, "parameters"));
    }
    let owners = earlier
        .iter()
        .filter(|e| e.share.is_none())
        .map(|e| quote(&e.name))
        .collect::<Vec<_>>()
        .join(", ");
    let share_field = format!("{field}.share");
    let device = match earlier.iter().position(|e| e.name == *target) {
        Some(k) => match &earlier[k].share {
            Some(s) => {
                return Err(FieldError::new(
                    share_field,
                    format!(
                        "'{}' shares '{}' itself; accepted: an earlier device with a model (no chains): {owners}",
                        quote(target),
                        quote(&earlier[s.device].name)
                    ),
                ))
            }
            None => k,
        },
        None => {
            return Err(FieldError::new(
                share_field,
                format!(
                    "no earlier device named '{}'; accepted: an earlier device with a model: {}",
                    quote(target),
                    if owners.is_empty() { "none" } else { &owners }
                ),
            ))
        }
    };
    let start_bytes = match &d.start {
        Some(v) => Some(v.bytes(&format!("{field}.start"))?),
        None => None,
    };
    let capacity_field = format!("{field}.capacity");
    let capacity_bytes = match d.params.get("capacity") {
        None => None,
        Some(toml::Value::Integer(n)) if *n >= 0 => Some(*n as u64),
        Some(toml::Value::String(t)) => Some(SizeValue::Text(t.clone()).bytes(&capacity_field)?),
        Some(other) => {
            return Err(FieldError::new(
                capacity_field,
                format!("{other}: {}", params::Kind::SIZE.expected()),
            ))
        }
    };
    if let Some(b) = start_bytes.filter(|b| b % 4096 != 0) {
        return Err(FieldError::new(
            format!("{field}.start"),
            format!("{b} bytes: accepted: a multiple of 4k"),
        ));
    }
    if let Some(b) = capacity_bytes.filter(|b| *b == 0 || b % 4096 != 0) {
        return Err(FieldError::new(
            capacity_field,
            format!("{b} bytes: accepted: a positive multiple of 4k"),
        ));
    }
    Ok(Some(ShareSpec {
        device,
        start_bytes,
        capacity_bytes,
    }))
}
